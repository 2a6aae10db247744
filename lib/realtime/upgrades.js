'use strict'

/**
 * Upgraded connections (WebSocket and other `Upgrade:` protocols) leave
 * HTTP: the drain must not take them for idle keep-alive sockets and cut
 * them (the client would see 1006, an abnormal closure). They are counted,
 * and on drain a WebSocket is closed with code 1012 (Service Restart) on
 * reload/recycle or 1001 (Going Away) on shutdown, then the connection ends
 * once the client answers it (or CLOSE_HANDSHAKE_MS passes).
 *
 * A WebSocket owned by ws (a `ws` server, or socket.io's engine.io, which
 * runs ws) is closed through ws's own close(): ws then sends the one Close
 * frame the connection may carry (RFC 6455 5.5.1), refuses the app's later
 * sends, and answers the client's Close without a second one. A WebSocket
 * the app already closed (in onDrain, say) is left alone. Only a WebSocket
 * no ws owns (another library) gets a Close frame written by us, between
 * that library's frames.
 */

const debug = require('debug')('clusterize:upgrades')
const { webSocketOfSocket } = require('./socketio-internals')

const kUpgrade = Symbol('clusterize.upgrade')

/** How long a WebSocket client has to answer our Close before its connection is cut. */
const CLOSE_HANDSHAKE_MS = 2000

/** Close codes (RFC 6455, IANA registry). */
const CLOSE_CODES = { restart: 1012, goingAway: 1001 }

/**
 * @param {import('http').Server} server
 */
function trackUpgrades (server) {
  const sockets = new Set()
  let prepended = false

  // Only once the app listens for upgrades: an 'upgrade' listener of our own
  // would make Node hand over upgrade requests nobody answers.
  function ensureFirst (event) {
    if (event !== 'upgrade' || prepended) return
    prepended = true
    server.prependListener('upgrade', onUpgrade)
  }
  if (server.listenerCount('upgrade') > 0) ensureFirst('upgrade')
  else server.on('newListener', ensureFirst)

  function onUpgrade (req, socket) {
    const protocol = String(req.headers.upgrade || '').toLowerCase()
    socket[kUpgrade] = protocol
    sockets.add(socket)
    socket.once('close', function onUpgradedClose () { sockets.delete(socket) })
  }

  /**
   * Say goodbye to every upgraded connection: a close frame for WebSockets,
   * then end our side once the client has answered (or `graceMs` passes; for a
   * WebSocket at most CLOSE_HANDSHAKE_MS).
   * @param {'reload'|'shutdown'|string} reason
   * @param {number} graceMs
   */
  function closeAll (reason, graceMs) {
    const code = reason === 'shutdown' || reason === 'primary-gone' ? CLOSE_CODES.goingAway : CLOSE_CODES.restart
    const text = code === CLOSE_CODES.goingAway ? 'server going away' : 'server restarting'
    debug('closing %d upgraded connections with %d', sockets.size, code)
    for (const socket of sockets) {
      if (socket.destroyed) continue
      const webSocket = socket[kUpgrade] === 'websocket'
      if (webSocket) closeWebSocket(socket, code, text)
      // A live client echoes the Close within a round trip and closes TCP; one
      // that does not (its network is gone, say mid-upgrade) is cut after
      // CLOSE_HANDSHAKE_MS rather than holding the drain to its deadline.
      const timer = setTimeout(() => socket.destroy(), Math.max(0, webSocket ? Math.min(graceMs, CLOSE_HANDSHAKE_MS) : graceMs))
      timer.unref()
      socket.once('close', () => clearTimeout(timer))
    }
  }

  return {
    /** Is this socket an upgraded connection? */
    has: (socket) => socket[kUpgrade] !== undefined,
    closeAll,
    get count () { return sockets.size }
  }
}

/**
 * One Close frame on `socket`: through its ws WebSocket when ws owns it
 * (not at all if that one is no longer open: the app closed it, or the
 * client did), else written raw.
 */
function closeWebSocket (socket, code, text) {
  const ws = webSocketOfSocket(socket)
  if (ws !== null) {
    if (ws.readyState === ws.OPEN) ws.close(code, text)
    return
  }
  if (socket.writable) socket.write(closeFrame(code, text))
}

/** An unmasked server-to-client close frame (RFC 6455 5.5.1). */
function closeFrame (code, reason) {
  const text = Buffer.from(reason, 'utf8')
  const frame = Buffer.alloc(4 + text.length)
  frame[0] = 0x88 // FIN + opcode 8 (close)
  frame[1] = 2 + text.length
  frame.writeUInt16BE(code, 2)
  text.copy(frame, 4)
  return frame
}

module.exports = { trackUpgrades, CLOSE_CODES, CLOSE_HANDSHAKE_MS }
