'use strict'

/**
 * Tracks the server's connections and requests, and drains them without
 * racing clients: closing an idle keep-alive socket races with a client that
 * is already sending its next request on it, so while draining the next
 * request on each socket is answered with `Connection: close`, and a socket
 * is closed by us only once it has been idle for longer than its client
 * ever paused on it (twice its longest pause, at least `idleCloseMs`, at
 * most the server's keepAliveTimeout), or the deadline passes.
 *
 * It also bounds idle connections (no request in flight: kept alive between
 * requests, or still sending a request head): beyond `maxIdle` one is
 * destroyed, so a flood of sockets that never send a request cannot take
 * every file descriptor and starve the clients being served. Sockets that
 * never sent a complete request go first, oldest first; a kept-alive socket
 * that has been answered goes only when no such socket is left (then the one
 * idle the longest): a reconnecting flood costs the clients being served nothing.
 */

const debug = require('debug')('clusterize:drain')
const { trackUpgrades } = require('../realtime/upgrades')
const { watchSlowBodies } = require('./slow-bodies')

const kActive = Symbol('clusterize.active')
const kIdleSince = Symbol('clusterize.idleSince')
const kClosing = Symbol('clusterize.closing')
const kSocket = Symbol('clusterize.socket')
const kLongestPause = Symbol('clusterize.longestPause')

/**
 * @param {import('http').Server} server
 * @param {{ idleCloseMs?: number, maxIdle?: number, slowBody?: { minBytesPerSecond: number, graceMs: number }, log?: object }} [options]
 *   `maxIdle`: idle connections kept at most (default: no bound);
 *   `slowBody`: requests whose body arrives slower than this are closed (./slow-bodies.js), and
 *   at most half of maxIdle such requests are held at once;
 *   `log`: told once when shedding starts
 */
function trackConnections (server, options) {
  const idleCloseMs = (options && options.idleCloseMs) || 2000
  const maxIdle = (options && options.maxIdle) || Infinity
  const log = options && options.log
  const sockets = new Set()
  // Idle sockets, in idle-since order (a socket moves to the end whenever it becomes idle):
  // those that never sent a complete request, and kept-alive ones that have been answered.
  const fresh = new Set()
  const kept = new Set()
  const state = { inFlight: 0, served: 0, draining: false, shed: 0 }
  const upgrades = trackUpgrades(server)
  const slowBodies = watchSlowBodies(server, Object.assign({ minBytesPerSecond: 0, graceMs: 0 }, options && options.slowBody, {
    // Slow bodies hold descriptors as idle sockets do: they share the same budget, half each.
    max: Number.isFinite(maxIdle) ? Math.max(8, Math.floor(maxIdle / 2)) : Infinity,
    log
  }))
  let idleTimer = null
  let onDrained = null

  server.on('connection', function onConnection (socket) {
    sockets.add(socket)
    socket[kActive] = 0
    socket[kIdleSince] = Date.now()
    socket[kLongestPause] = 0
    // 'close' fires once: one shared listener, no closure per connection.
    socket.on('close', onSocketClose)
    fresh.add(socket)
    if (fresh.size + kept.size > maxIdle) shedIdle()
  })

  function onSocketClose () {
    sockets.delete(this)
    fresh.delete(this)
    kept.delete(this)
    checkDrained()
  }

  /** Destroy idle sockets until at most maxIdle are: never-requested ones first, then kept-alive ones. */
  function shedIdle () {
    shedFrom(fresh)
    shedFrom(kept)
    if (state.shed > 0 && !state.shedLogged) {
      state.shedLogged = true
      if (log) log.warn(`more than ${maxIdle} idle connections: closing those that never sent a request first, then the ones idle the longest (option maxIdleConnections); counted in stats as idleShed`, { pid: process.pid })
    }
  }

  function shedFrom (set) {
    for (const socket of set) {
      if (fresh.size + kept.size <= maxIdle) return
      set.delete(socket)
      // An upgraded connection left HTTP: it is the app's, never idle here.
      if (upgrades.has(socket)) continue
      state.shed++
      socket.destroy()
    }
  }

  // Runs before the app so the Connection header can still be changed.
  server.prependListener('request', function onRequest (req, res) {
    const socket = req.socket
    state.inFlight++
    if (socket[kActive]++ === 0) {
      fresh.delete(socket)
      kept.delete(socket)
      const pause = Date.now() - socket[kIdleSince]
      if (pause > socket[kLongestPause]) socket[kLongestPause] = pause
    }
    if (state.draining) res.shouldKeepAlive = false
    res[kSocket] = socket
    // 'close' follows 'finish' and also fires when the connection drops:
    // one listener, no per-request closure, on the hot path.
    res.on('close', onResponseClose)
  })

  function onResponseClose () {
    const socket = this[kSocket]
    if (!socket) return
    this[kSocket] = null
    state.inFlight--
    state.served++
    socket[kIdleSince] = Date.now()
    if (--socket[kActive] === 0 && sockets.has(socket) && !socket.destroyed) {
      kept.add(socket)
      if (fresh.size + kept.size > maxIdle) shedIdle()
    }
  }

  /** How long a socket must be idle before closing it is unlikely to cut its client's next request. */
  function quietAfter (socket) {
    const cap = server.keepAliveTimeout > 0 ? Math.max(server.keepAliveTimeout, idleCloseMs) : Infinity
    return Math.min(cap, Math.max(idleCloseMs, 2 * socket[kLongestPause] + 250))
  }

  function closeIdleSockets () {
    const now = Date.now()
    for (const socket of sockets) {
      if (socket[kClosing] || socket[kActive] !== 0 || upgrades.has(socket) || now - socket[kIdleSince] < quietAfter(socket)) continue
      socket[kClosing] = true
      // end() sends FIN after pending writes; destroy if the peer never answers it.
      socket.end()
      setTimeout(() => socket.destroy(), 1000).unref()
    }
  }

  function checkDrained () {
    if (state.draining && sockets.size === 0 && onDrained) {
      const callback = onDrained
      onDrained = null
      clearInterval(idleTimer)
      callback()
    }
  }

  /**
   * Stop taking new requests on kept-alive sockets and resolve once every
   * socket is closed. In-flight requests are answered with Connection: close;
   * upgraded connections get a close frame (see ./upgrades.js).
   * @param {{ reason?: string, graceMs?: number }} [options]
   * @returns {Promise<void>}
   */
  function drain (options) {
    if (state.draining) return drain.promise
    state.draining = true
    upgrades.closeAll((options && options.reason) || 'reload', (options && options.graceMs) || 5000)
    debug('draining %d sockets, %d requests in flight', sockets.size, state.inFlight)
    for (const socket of sockets) {
      const res = socket._httpMessage
      if (res && !res.headersSent) res.shouldKeepAlive = false
    }
    drain.promise = new Promise((resolve) => {
      onDrained = resolve
      closeIdleSockets()
      idleTimer = setInterval(closeIdleSockets, Math.max(50, Math.floor(idleCloseMs / 4)))
      idleTimer.unref()
      checkDrained()
    })
    return drain.promise
  }

  /** Destroy every socket at once (the drain deadline passed). */
  function destroyAll () {
    for (const socket of sockets) socket.destroy()
  }

  return {
    drain,
    destroyAll,
    get inFlight () { return state.inFlight },
    get served () { return state.served },
    get connections () { return sockets.size },
    /** Connections with no request in flight (upgraded ones are dropped from the count here, once per heartbeat). */
    get idle () {
      for (const socket of fresh) if (upgrades.has(socket)) fresh.delete(socket)
      for (const socket of kept) if (upgrades.has(socket)) kept.delete(socket)
      return fresh.size + kept.size
    },
    /** Idle connections destroyed so far because more than maxIdle were idle. */
    get shed () { return state.shed },
    /** Requests closed because their body arrived slower than slowBody.minBytesPerSecond. */
    get slowBodyShed () { return slowBodies.shed },
    /** Open upgraded connections (WebSockets). */
    get upgraded () { return upgrades.count },
    get draining () { return state.draining }
  }
}

module.exports = { trackConnections }
