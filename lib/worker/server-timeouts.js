'use strict'

/**
 * Make http.Server's headersTimeout and requestTimeout hold for a server
 * that never listens itself.
 *
 * Why they do not by themselves: Node (lib/_http_server.js, v18 to v24)
 * enforces both from one interval, checkConnections(), over the server's
 * ConnectionsList. Both are created by setupConnectionsTracking(), which the
 * Server constructor registers as a 'listening' listener
 * (`this.on('listening', setupConnectionsTracking)`), and every connection's
 * parser joins the list that exists when connectionListener() runs. With
 * 'rr' and 'sticky' scheduling the primary accepts and hands each
 * connection to the worker, which emits 'connection' into a server that
 * never listened (a warm spare's server does not either): no list, no
 * interval, so a client that sends half a request head holds its socket
 * until it goes away. keepAliveTimeout and server.timeout are per-socket
 * timers set in connectionListener() and the response path, so they hold
 * in every mode.
 *
 * The fix runs Node's own setup, found through the public listeners() of
 * the 'listening' event, before the first connection arrives. It is matched
 * by its function name; where a Node release renames or moves it, the
 * fallback below enforces both timeouts with our own checks.
 */

const debug = require('debug')('clusterize:timeouts')

const NODE_SETUP_NAME = 'setupConnectionsTracking'
const DEFAULT_CHECK_MS = 30000
const REQUEST_TIMEOUT_RESPONSE = 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n'

const kStart = Symbol('clusterize.messageStart')
const kHeadersDone = Symbol('clusterize.headersDone')
const kBytesAtRest = Symbol('clusterize.bytesAtRest')
const kRequest = Symbol('clusterize.request')
const kResponse = Symbol('clusterize.response')

/**
 * Start enforcing `server.headersTimeout` and `server.requestTimeout` on
 * connections emitted into the server, whether or not it ever listens.
 * Call it before the first connection. Idempotent per server.
 * @param {import('http').Server} server
 * @param {{ native?: boolean }} [options] `native: false` skips Node's own
 *   checker and uses the fallback (for tests of the fallback)
 * @returns {'native'|'fallback'|'none'} how the timeouts are enforced
 */
function enforceServerTimeouts (server, options) {
  if (typeof server.headersTimeout !== 'number' && typeof server.requestTimeout !== 'number') return 'none'
  const setup = !options || options.native !== false ? nodeConnectionsSetup(server) : null
  if (setup !== null) {
    // Node's own: it clears and restarts its interval if the server listens later.
    setup.call(server)
    debug('using node\'s connection checks (every %d ms)', server.connectionsCheckingInterval)
    return 'native'
  }
  startFallbackChecks(server)
  debug('node\'s connection checks not found: using our own')
  return 'fallback'
}

/** Node's 'listening' listener that creates the connections list and its checking interval, or null. */
function nodeConnectionsSetup (server) {
  const listeners = server.listeners('listening')
  for (let i = 0; i < listeners.length; i++) {
    if (typeof listeners[i] === 'function' && listeners[i].name === NODE_SETUP_NAME) return listeners[i]
  }
  return null
}

/**
 * Our own checks, with Node's semantics as far as public API shows them: a
 * request's head must arrive within headersTimeout and the whole request
 * within requestTimeout, both counted from the message's first byte (seen
 * through socket.bytesRead, at the granularity of the check), or from the
 * connection for its first request. An expired socket gets a 408 when no
 * response has started, and is destroyed.
 */
function startFallbackChecks (server) {
  const sockets = new Set()
  const checkMs = server.connectionsCheckingInterval > 0 ? server.connectionsCheckingInterval : DEFAULT_CHECK_MS

  server.on('connection', function trackForTimeouts (socket) {
    socket[kStart] = Date.now()
    socket[kHeadersDone] = false
    socket[kBytesAtRest] = 0
    socket[kRequest] = null
    socket[kResponse] = null
    sockets.add(socket)
    socket.once('close', function untrackForTimeouts () { sockets.delete(socket) })
  })

  server.prependListener('request', function onRequestHead (req, res) {
    const socket = req.socket
    if (socket[kStart] === 0) socket[kStart] = Date.now()
    socket[kHeadersDone] = true
    socket[kRequest] = req
    socket[kResponse] = res
  })

  const timer = setInterval(function checkTimeouts () {
    const headersTimeout = validTimeout(server.headersTimeout)
    const requestTimeout = validTimeout(server.requestTimeout)
    if (headersTimeout === 0 && requestTimeout === 0) return
    const now = Date.now()
    for (const socket of sockets) {
      if (socket.destroyed) continue
      const req = socket[kRequest]
      // req.complete: the parser has the whole request (its 'end' waits for the app to read it).
      if (req !== null && req.complete) {
        socket[kRequest] = null
        socket[kStart] = 0
        socket[kHeadersDone] = false
        socket[kBytesAtRest] = socket.bytesRead
        continue
      }
      if (socket[kStart] === 0) {
        // Bytes since the last complete request: a new message has begun.
        if (socket.bytesRead > socket[kBytesAtRest]) socket[kStart] = now
        continue
      }
      const elapsed = now - socket[kStart]
      const expired = (!socket[kHeadersDone] && headersTimeout > 0 && elapsed > headersTimeout) ||
        (requestTimeout > 0 && elapsed > requestTimeout)
      if (expired) expire(socket)
    }
  }, checkMs)
  timer.unref()
  server.once('close', () => clearInterval(timer))
}

/** Answer 408 when no response has started, as Node does, then make sure the socket goes. */
function expire (socket) {
  debug('request timed out: closing a connection')
  const res = socket[kResponse]
  socket[kStart] = 0
  // A response still being written (pipelining) cannot take a 408 in its middle.
  const responding = res !== null && res.headersSent && !res.writableFinished
  if (!responding && socket.writable) {
    socket.end(REQUEST_TIMEOUT_RESPONSE)
    setTimeout(() => socket.destroy(), 1000).unref()
  } else {
    socket.destroy()
  }
}

function validTimeout (value) {
  return Number.isFinite(value) && value >= 0 ? value : 0
}

module.exports = { enforceServerTimeouts }
