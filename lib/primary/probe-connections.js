'use strict'

/**
 * The probes server lives in the primary, the one process that must never
 * run out of descriptors: it forks workers, hands app connections to them
 * ('rr', 'sticky'), answers its control socket. A flood of idle sockets on
 * the probes port (open to the network with `probes.host: '0.0.0.0'`) once
 * took every descriptor it had. So:
 * - at most `maxConnections` probes connections are open at once;
 * - past that, or when the primary's open descriptors come near its limit
 *   (a reserve is kept for forking and hand-offs), an idle socket is closed
 *   to make room: first one that never sent a complete request, the oldest,
 *   then a kept-alive one idle the longest; a socket with a request in
 *   flight (a dashboard stream, a /metrics scrape) is never closed for it.
 *   With none idle, the newcomer is closed: what is being answered keeps its turn;
 * - short header and request timeouts, and no request body beyond
 *   MAX_BODY_BYTES (413, and the rest is never read).
 */

const debug = require('debug')('clusterize:probes')
const { fdSoftLimit, createDescriptorReserve } = require('../fd-limit')

/** A probe's request head must arrive within this. */
const HEADERS_TIMEOUT_MS = 5000
/** And the whole request (probes take no body) within this. */
const REQUEST_TIMEOUT_MS = 10000
/** How often Node checks both. */
const CHECK_INTERVAL_MS = 1000
/** Probes take no body; a small one (a client that always sends `{}`) is read and ignored. */
const MAX_BODY_BYTES = 4096
/** Below this many probes connections, the descriptor count is not read at all. */
const RESERVE_CHECK_FROM = 16

const kRequests = Symbol('clusterize.probeRequests')
const kActive = Symbol('clusterize.probeActive')
const kSocket = Symbol('clusterize.probeSocket')

/**
 * The default `probes.maxConnections`: room for every dashboard stream plus
 * 64 others, but never more than an eighth of the open-file limit.
 * @param {number} maxStreams
 * @param {number|null} [limit] the open-file soft limit (this process's when omitted)
 * @returns {number}
 */
function defaultProbeConnections (maxStreams, limit) {
  if (limit === undefined) limit = fdSoftLimit()
  const wanted = maxStreams + 64
  return limit === null ? wanted : Math.max(16, Math.min(wanted, Math.floor(limit / 8)))
}

/**
 * Apply the bounds to a probes server (before it listens).
 * @param {import('http').Server} server
 * @param {{ maxConnections: number, log?: object, descriptors?: { limit: number|null, reserve: number, low: () => boolean } }} options
 *   `descriptors`: this process's reserve (../fd-limit.js createDescriptorReserve) by default
 * @returns {{ status: () => { open: number, shed: number, refused: number, bodyRefused: number }, refuseBody: (req: object, res: object) => boolean }}
 */
function guardProbeConnections (server, options) {
  const maxConnections = options.maxConnections
  const descriptors = options.descriptors || createDescriptorReserve()
  const { limit, reserve } = descriptors
  const log = options.log
  const sockets = new Set()
  // Idle sockets in idle-since order, those that never sent a complete request apart.
  const fresh = new Set()
  const kept = new Set()
  const counts = { shed: 0, refused: 0, bodyRefused: 0 }
  let told = false

  server.headersTimeout = HEADERS_TIMEOUT_MS
  server.requestTimeout = REQUEST_TIMEOUT_MS
  server.keepAliveTimeout = 5000
  // Read when the server starts listening: Node's own checks of the two timeouts.
  server.connectionsCheckingInterval = CHECK_INTERVAL_MS

  server.on('connection', function onProbeConnection (socket) {
    socket[kRequests] = 0
    socket[kActive] = 0
    if (sockets.size >= maxConnections || nearDescriptorLimit()) {
      if (!shedOneIdle()) {
        counts.refused++
        tell()
        socket.destroy()
        return
      }
    }
    sockets.add(socket)
    fresh.add(socket)
    socket.once('close', onProbeClose)
  })

  function onProbeClose () {
    sockets.delete(this)
    fresh.delete(this)
    kept.delete(this)
  }

  server.prependListener('request', function onProbeRequest (req, res) {
    const socket = req.socket
    socket[kRequests]++
    if (socket[kActive]++ === 0) {
      fresh.delete(socket)
      kept.delete(socket)
    }
    res[kSocket] = socket
    res.once('close', onProbeResponseClose)
  })

  function onProbeResponseClose () {
    const socket = this[kSocket]
    this[kSocket] = null
    if (!socket || --socket[kActive] > 0 || !sockets.has(socket) || socket.destroyed) return
    kept.add(socket)
  }

  /** Close the idle socket that matters least; false when none is idle. */
  function shedOneIdle () {
    const victim = first(fresh) || first(kept)
    if (victim === undefined) return false
    fresh.delete(victim)
    kept.delete(victim)
    sockets.delete(victim)
    counts.shed++
    tell()
    victim.destroy()
    return true
  }

  function nearDescriptorLimit () {
    return sockets.size >= RESERVE_CHECK_FROM && descriptors.low()
  }

  function tell () {
    if (told) return
    told = true
    if (log) log.warn(`probes server: more than ${maxConnections} connections (probes.maxConnections) or the primary near its open-file limit (${limit === null ? 'unknown' : limit}, ${reserve} kept in reserve): closing idle probes connections first, then refusing new ones; counted in /stats as probes.shed and probes.refused`)
    debug('shedding probes connections: %d open', sockets.size)
  }

  /**
   * Answer 413 to a request with a body beyond MAX_BODY_BYTES (or of unknown length), and never
   * read it: the socket stops reading and closes once the answer is out.
   * @returns {boolean} whether the request was refused
   */
  function refuseBody (req, res) {
    const length = req.headers['content-length']
    const chunked = req.headers['transfer-encoding'] !== undefined
    if (!chunked && (length === undefined || Number(length) <= MAX_BODY_BYTES)) return false
    counts.bodyRefused++
    const socket = req.socket
    res.shouldKeepAlive = false
    res.writeHead(413, { 'Content-Type': 'text/plain', 'Cache-Control': 'no-store', Connection: 'close' })
    res.end(`probes requests take no body (at most ${MAX_BODY_BYTES} bytes)\n`)
    // Node would read the rest of the body to reuse the socket; stop reading, let the answer
    // and the FIN go out, then close for good.
    res.once('finish', function stopReading () {
      socket.pause()
      setTimeout(() => socket.destroy(), 2000).unref()
    })
    return true
  }

  return {
    status: () => ({ open: sockets.size, shed: counts.shed, refused: counts.refused, bodyRefused: counts.bodyRefused }),
    refuseBody
  }
}

function first (set) {
  for (const item of set) return item
  return undefined
}

module.exports = { guardProbeConnections, defaultProbeConnections, MAX_BODY_BYTES }
