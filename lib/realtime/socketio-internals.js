'use strict'

/**
 * Every access clusterize makes to a private field of socket.io, engine.io
 * or ws, in one place. Nothing else in lib/ touches another package's
 * internals: a new version that moves a field breaks one function here,
 * which then answers with its fallback (null, or doing nothing) instead of
 * throwing, and says so once on `debug('clusterize:socket.io-internals')`.
 *
 * Each function checks the shape it relies on before using it. Versions
 * tested: the peerDependencies ranges in package.json (oldest and newest,
 * see test/compat/oldest-peers.js).
 */

const debug = require('debug')('clusterize:socket.io-internals')

const missed = new Set()

/** Log once per access that fell back. */
function fellBack (what) {
  if (missed.has(what)) return
  missed.add(what)
  debug('%s: not found in this version, using the fallback', what)
}

/** Is `value` shaped like a ws WebSocket (the public part we call)? */
function isWebSocketLike (value) {
  return value !== null && typeof value === 'object' && typeof value.close === 'function' &&
    typeof value.readyState === 'number' && typeof value.OPEN === 'number'
}

/**
 * The ws WebSocket that owns an upgraded TCP socket, or null.
 * ws marks the socket it takes with its private `Symbol('websocket')`
 * (ws/lib/constants.js kWebSocket) once the handshake is done. The symbol
 * is found by its description, so every copy of ws in the tree matches
 * (the app's, engine.io's own). Fallback: null (the caller writes its own
 * close frame).
 * @param {import('net').Socket} socket
 * @returns {object|null} a ws WebSocket
 */
function webSocketOfSocket (socket) {
  if (!socket || typeof socket !== 'object') return null
  for (const symbol of Object.getOwnPropertySymbols(socket)) {
    if (symbol.description !== 'websocket') continue
    const owner = socket[symbol]
    if (isWebSocketLike(owner)) return owner
  }
  return null
}

/**
 * The TCP socket under an engine.io WebSocket transport, or null: engine.io
 * keeps the ws WebSocket as `transport.socket`, and ws keeps the TCP socket
 * as `_socket`. Fallback: null (the caller does not cork).
 * @param {object} transport an engine.io transport
 * @returns {import('net').Socket|null}
 */
function tcpSocketOfTransport (transport) {
  const ws = transport && transport.socket
  const tcp = ws && typeof ws === 'object' ? ws._socket : null
  if (tcp && typeof tcp.cork === 'function' && typeof tcp.uncork === 'function') return tcp
  fellBack('engine.io transport.socket._socket')
  return null
}

/**
 * Replace `send(packets)` on one engine.io transport instance (the method
 * engine.io's Socket#flush calls with every queued packet). `wrap` gets the
 * original, bound to the transport, and returns the replacement.
 * Fallback: the transport is left as it is, and false is returned.
 * @param {object} transport
 * @param {(send: (packets: object[]) => void) => (packets: object[]) => void} wrap
 * @returns {boolean} whether send was replaced
 */
function wrapTransportSend (transport, wrap) {
  if (!transport || typeof transport.send !== 'function') {
    fellBack('engine.io transport.send')
    return false
  }
  transport.send = wrap(transport.send.bind(transport))
  return true
}

/**
 * socket.io's private session id of a socket (`socket.pid`, set when
 * connectionStateRecovery is on), or null.
 * @param {object} socket a socket.io Socket
 * @returns {string|null}
 */
function privateSessionIdOf (socket) {
  const pid = socket ? socket.pid : undefined
  if (typeof pid === 'string') return pid
  if (pid !== undefined) fellBack('socket.io socket.pid')
  return null
}

/**
 * The options a socket.io Server was built with (`server.opts`), or {}.
 * @param {object} server a socket.io Server
 * @returns {object}
 */
function serverOptionsOf (server) {
  const opts = server ? server.opts : undefined
  if (opts && typeof opts === 'object') return opts
  fellBack('socket.io server.opts')
  return {}
}

/**
 * Run `before(client, auth)` each time socket.io's `@private`
 * `Namespace#_add(client, auth, fn)` takes a new connection, then socket.io's
 * own `_add`; `after(client, auth)` runs once `_add`'s synchronous part has
 * returned (or thrown). Fallback: nothing is wrapped.
 * @param {object} nsp a socket.io Namespace
 * @param {{ before?: Function, after?: Function }} hooks
 * @returns {() => void} restores socket.io's own `_add`
 */
function interceptNamespaceAdd (nsp, hooks) {
  const add = nsp ? nsp._add : undefined
  if (typeof add !== 'function') {
    fellBack('socket.io Namespace#_add')
    return function nothingToRestore () {}
  }
  const before = hooks.before || function none () {}
  const after = hooks.after || function none () {}
  nsp._add = function addIntercepted (client, auth, fn) {
    before(client, auth)
    try {
      return add.call(this, client, auth, fn)
    } finally {
      after(client, auth)
    }
  }
  return function restoreNamespaceAdd () {
    if (nsp._add !== add) nsp._add = add
  }
}

// socket.io-adapter's cluster message types: wire numbers, the same in every 2.5.x, but the enum
// is exported only from 2.5.4 on (2.5.3, which socket.io 4.7.0 accepts, keeps it inside).
const CLUSTER_MESSAGE_TYPES = { BROADCAST: 3 }

/**
 * The number of a socket.io-adapter cluster message type (`MessageType[name]`).
 * Fallback: the number every 2.5.x uses.
 * @param {object} base `require('socket.io-adapter')`
 * @param {'BROADCAST'} name
 * @returns {number}
 */
function clusterMessageType (base, name) {
  const types = base ? base.MessageType : undefined
  if (types && typeof types[name] === 'number') return types[name]
  fellBack('socket.io-adapter MessageType')
  return CLUSTER_MESSAGE_TYPES[name]
}

module.exports = {
  clusterMessageType,
  webSocketOfSocket,
  tcpSocketOfTransport,
  wrapTransportSend,
  privateSessionIdOf,
  serverOptionsOf,
  interceptNamespaceAdd
}
