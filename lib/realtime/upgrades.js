'use strict'

/**
 * Upgraded connections (WebSocket and other `Upgrade:` protocols) leave
 * HTTP: the drain must not take them for idle keep-alive sockets and cut
 * them (the client would see 1006, an abnormal closure). They are counted,
 * and on drain a WebSocket gets a proper close frame from the server with
 * code 1012 (Service Restart) on reload/recycle or 1001 (Going Away) on
 * shutdown, then the connection ends once the client answers it. This works
 * under any WebSocket library (ws, socket.io's engine.io): the frame is
 * written between the library's own frames, never inside one.
 */

const debug = require('debug')('clusterize:upgrades')

const kUpgrade = Symbol('clusterize.upgrade')

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
   * then end our side once the client has answered (or `graceMs` passes).
   * @param {'reload'|'shutdown'|string} reason
   * @param {number} graceMs
   */
  function closeAll (reason, graceMs) {
    const code = reason === 'shutdown' || reason === 'primary-gone' ? CLOSE_CODES.goingAway : CLOSE_CODES.restart
    debug('closing %d upgraded connections with %d', sockets.size, code)
    for (const socket of sockets) {
      if (socket.destroyed) continue
      if (socket[kUpgrade] === 'websocket' && socket.writable) socket.write(closeFrame(code, code === CLOSE_CODES.goingAway ? 'server going away' : 'server restarting'))
      // The client echoes the close and closes TCP; end ours if it does not.
      const timer = setTimeout(() => socket.destroy(), Math.max(0, graceMs))
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

module.exports = { trackUpgrades, CLOSE_CODES }
