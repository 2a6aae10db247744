'use strict'

/**
 * The worker's side of 'balanced' scheduling (the design is in
 * lib/primary/balancer.js): accept from our own copy of the shared listening
 * socket, and close that copy while we hold our limit of open connections or
 * the primary says our event loop is late. The socket stays open in the
 * primary and in the other workers, so a queued connection waits for one of
 * them. We resume on a spare copy we already hold, so resuming costs no round
 * trip to the primary; the next spare is asked for at once.
 *
 * Accepted connections are emitted into the app's server as 'rr' hands them
 * in (the server itself never listens): the same path, so the server
 * timeouts and idle-connection shedding that hold there hold here.
 */

const net = require('net')
const debug = require('debug')('clusterize:balanced')
const protocol = require('../protocol')

/**
 * LOAD reports while connections come and go: within REPORT_MS (times the
 * worker count over REPORT_WORKERS, so the whole cluster sends at most about
 * 1,000 a second) when the count moved by enough to change a limit, else at
 * most every QUIET_REPORT_MS (a pause reports at once). Short connections
 * (`Connection: close`) move the count all the time; this keeps the
 * primary's work per unit of time, not per connection, and bounded on a
 * many-core box.
 */
const REPORT_MS = 5
const REPORT_WORKERS = 5
const QUIET_REPORT_MS = 100
/** A move of this many connections, or this fraction of the count, is worth a report soon. */
const SOON_MOVE = 2
const SOON_FRACTION = 0.1
/** Before the primary's first word: accept this many, then wait for it. */
const FIRST_LIMIT = 4
/**
 * Copies of the socket held ready for resuming. Two, because in a burst a
 * worker pauses and resumes faster than one copy comes back from a busy
 * primary, and a worker waiting for its copy falls behind the others.
 */
const SPARES = 2
/** The listen(2) backlog of every copy (Node's default). */
const BACKLOG = 511

/**
 * Accept on our own copy of the shared socket while we are under our limit
 * and not late; report our open connections to the primary.
 * @param {{ server: import('net').Server, channel: object, heartbeatMs: number, heartbeatTimeoutMs: number, workers?: number }} options
 *   after heartbeatTimeoutMs without a word from the primary (the time after which it
 *   would call us hung), we accept regardless of our limit
 * @returns {{ start: () => Promise<void>, onListen: Function, onShare: Function, stop: () => void }}
 */
function createBalancedListener (options) {
  const { server, channel } = options
  // Not a few heartbeats: a late worker reads the primary's words late too.
  const staleMs = options.heartbeatTimeoutMs
  const soonMs = Math.max(REPORT_MS, Math.round(REPORT_MS * (options.workers || 1) / REPORT_WORKERS))
  const quietMs = Math.max(QUIET_REPORT_MS, soonMs)
  let active = null
  const spares = []
  let asked = 0
  let open = 0
  let limit = FIRST_LIMIT
  let late = false
  let heardAt = Date.now()
  let stopped = false
  let reportTimer = null
  let reportDue = 0
  let lastReport = 0
  let reportedOpen = -1
  let reportedPaused = false
  let waitingForFirst = null
  const staleTimer = setInterval(checkStale, options.heartbeatMs)
  staleTimer.unref()

  function ask () {
    asked++
    channel.postNow(protocol.listenAsk())
  }

  /** May we take one more connection now? */
  function underLimit () {
    if (Date.now() - heardAt > staleMs) return true // the primary is not answering: serve regardless
    return !late && open < limit
  }

  function onConnection (err, clientHandle) {
    if (err || !clientHandle) return debug('accept failed: %s', err)
    open++
    const socket = new net.Socket({ handle: clientHandle, readable: true, writable: true })
    // net.Server sets TCP_NODELAY on what it accepts (http's default).
    socket.setNoDelay(true)
    socket.once('close', onSocketClose)
    server.emit('connection', socket)
    socket.resume()
    if (!underLimit()) pause()
    else scheduleReport()
  }

  function onSocketClose () {
    open--
    if (active === null && !stopped && underLimit()) resume()
    scheduleReport()
  }

  /** Close our copy: the kernel keeps queued connections for the others. */
  function pause () {
    if (active === null) return
    const closing = active
    active = null
    closing.close()
    debug('paused at %d open (limit %d, late %s)', open, limit, late)
    report()
  }

  function resume () {
    const handle = spares.shift()
    if (!handle) return refill()
    handle.onconnection = onConnection
    const err = handle.listen(BACKLOG)
    if (err) {
      debug('listening on a copy failed: %d', err)
      handle.close()
      return
    }
    active = handle
    debug('accepting at %d open (limit %d)', open, limit)
    // The next resume must not wait for the primary.
    refill()
    report()
  }

  function refill () {
    while (!stopped && spares.length + asked < SPARES) ask()
  }

  function scheduleReport () {
    const moved = Math.abs(open - reportedOpen)
    const soon = moved >= Math.max(SOON_MOVE, Math.ceil(reportedOpen * SOON_FRACTION))
    const now = Date.now()
    const due = lastReport + (soon ? soonMs : quietMs)
    if (due <= now) return report()
    if (reportTimer !== null) {
      if (reportDue <= due) return
      clearTimeout(reportTimer)
    }
    reportDue = due
    reportTimer = setTimeout(report, due - now)
  }

  function report () {
    if (reportTimer !== null) {
      clearTimeout(reportTimer)
      reportTimer = null
    }
    const paused = active === null
    if (open === reportedOpen && paused === reportedPaused) return
    reportedOpen = open
    reportedPaused = paused
    lastReport = Date.now()
    channel.post(protocol.load(open, paused))
  }

  function checkStale () {
    if (active === null && !stopped && spares.length > 0 && underLimit()) resume()
  }

  return {
    /** Get a copy of the socket and accept on it. @returns {Promise<void>} */
    start () {
      return new Promise((resolve) => {
        waitingForFirst = resolve
        ask()
      })
    },

    /** A copy of the listening socket came (LISTEN). */
    onListen (handle) {
      if (asked > 0) asked--
      if (!handle || typeof handle.listen !== 'function') return
      if (stopped) return handle.close()
      spares.push(handle)
      // Limit 0: a new primary holds us until the old one says go; ready, accepting nothing.
      const held = limit === 0 && Date.now() - heardAt <= staleMs
      if (active === null && !held && (waitingForFirst !== null || underLimit())) resume()
      else refill()
      if (waitingForFirst !== null && (active !== null || held)) {
        const resolve = waitingForFirst
        waitingForFirst = null
        resolve()
      }
    },

    /** The primary's limit for us (SHARE). */
    onShare (message) {
      if (!Number.isInteger(message.l) || message.l < 0) return
      heardAt = Date.now()
      limit = message.l
      late = message.late === true
      if (stopped) return
      if (active === null && underLimit()) resume()
      else if (active !== null && !underLimit()) pause()
    },

    /** Stop accepting for good (drain): close every copy we hold. */
    stop () {
      stopped = true
      clearInterval(staleTimer)
      if (reportTimer !== null) clearTimeout(reportTimer)
      if (active !== null) active.close()
      active = null
      for (const handle of spares.splice(0)) handle.close()
    }
  }
}

module.exports = { createBalancedListener }
