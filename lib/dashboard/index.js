'use strict'

/**
 * The live dashboard on the probes server: GET /dashboard (one
 * self-contained page), GET /dashboard/events (Server-Sent Events),
 * GET /dashboard/history (the rings, once per page load) and
 * POST /control/reload (only with a control token, sent in a header).
 *
 * Lifecycle events (worker ready/exit, reloads, crash loop, session store)
 * are kept in a small ring at all times: they are rare. Snapshots of the
 * workers are taken only while at least one page is open, once per
 * heartbeat interval; with no page open the dashboard does no work.
 *
 * A stream starts with a small hello (the latest snapshot and the last few
 * events); the page asks for the history separately, so a client that only
 * reconnects costs little. Streams are capped, rate-limited per peer and
 * closed when their client stops reading (./streams); history requests are
 * rate-limited per peer too (./peer-rate).
 */

const crypto = require('crypto')
const fs = require('fs')
const path = require('path')
const debug = require('debug')('clusterize:dashboard')
const { createStreams } = require('./streams')
const { createPeerRate } = require('./peer-rate')

const MAX_EVENTS = 200
/** What the charts show: samples are kept this long whether or not a page is open. */
const HISTORY_MS = 5 * 60 * 1000
/** A bound on samples whatever the interval (5 minutes at the shortest interval, 500 ms). */
const MAX_SNAPSHOTS = 600
const KEEPALIVE_MS = 15000
/** Events in the hello; the rest come from /dashboard/history. */
const HELLO_EVENTS = 10
/** Worker-provided text (a boot error) is cut here, so one event stays small. */
const MAX_TEXT = 500
const STREAM_DEFAULTS = { maxStreams: 64, maxStreamsPerPeer: 8, streamBufferBytes: 1024 * 1024, streamsPerMinute: 60 }

/**
 * @param {object} options
 * @param {{ token?: string, controlToken?: string }} options.probes the probes options
 * @param {number} options.intervalMs snapshot period (the heartbeat interval)
 * @param {() => object} options.stats the primary's stats()
 * @param {import('events').EventEmitter} options.handle the primary handle (lifecycle events)
 * @param {() => Promise<object>} options.reload
 */
function createDashboard (options) {
  const { probes, stats, handle } = options
  const intervalMs = Math.max(500, options.intervalMs)
  const limits = Object.assign({}, STREAM_DEFAULTS, pickDefined(probes, Object.keys(STREAM_DEFAULTS)))
  const clients = createStreams(limits)
  // A page asks for the history once per load: the same per-peer budget as its streams.
  const historyRate = createPeerRate(limits.streamsPerMinute)
  let historyRefused = 0
  const events = []
  const snapshots = []
  let timer = null
  let keepAlive = null
  let page = null
  // The history as sent, rebuilt only after a change: page loads in a burst
  // cost one JSON.stringify, not one each.
  let historyJson = null

  const record = (type, data) => {
    const event = Object.assign({ t: Date.now(), type }, clip(data))
    events.push(event)
    if (events.length > MAX_EVENTS) events.shift()
    historyJson = null
    broadcast('lifecycle', event)
  }
  const listeners = {
    'worker:ready': (w) => record('worker-ready', { id: w.id, pid: w.pid, generation: w.generation, state: w.state }),
    'worker:exit': (e) => record('worker-exit', { id: e.id, pid: e.pid, generation: e.generation, reason: e.reason, code: e.code, signal: e.signal }),
    'reload:start': (r) => record('reload-start', { generation: r.generation }),
    'reload:done': (r) => record('reload-done', { ok: r.ok, rolledBack: r.rolledBack, reason: r.reason, durationMs: r.durationMs, generation: r.generation, replaced: r.replaced }),
    'scale:done': (r) => record('scale-done', { ok: r.ok, from: r.from, to: r.to, why: r.why, reason: r.reason, durationMs: r.durationMs }),
    'upgrade:start': (u) => record('upgrade-start', { node: u.node }),
    'upgrade:done': (u) => record('upgrade-done', { ok: u.ok, reason: u.reason, pid: u.pid, previousPid: u.previousPid, node: u.node, durationMs: u.durationMs }),
    crashloop: (i) => record('crashloop', { generation: i.generation, crashes: i.crashes, lastError: i.lastError }),
    'session:down': (s) => record('session-down', s),
    'session:up': (s) => record('session-up', s),
    'bridge:up': (s) => record('bridge-up', { channel: s.channel }),
    'bridge:down': (s) => record('bridge-down', { lastError: s.lastError }),
    shutdown: () => record('shutdown', {})
  }
  for (const [name, listener] of Object.entries(listeners)) handle.on(name, listener)

  function snapshot () {
    const s = stats()
    return {
      t: Date.now(),
      scheduling: s.scheduling,
      generation: s.generation,
      reloads: s.reloads,
      scaling: s.scaling ? { mode: s.scaling.mode, workers: s.scaling.workers, min: s.scaling.min, max: s.scaling.max } : null,
      crashLooping: s.crashLooping,
      shuttingDown: s.shuttingDown,
      bridge: s.bus && s.bus.bridge ? { connected: s.bus.bridge.connected, lastError: s.bus.bridge.lastError || null } : null,
      workers: s.workers.map((w) => {
        const h = w.heartbeat || {}
        return {
          id: w.id,
          pid: w.pid,
          generation: w.generation,
          state: w.state,
          uptimeMs: w.uptimeMs,
          restarts: w.restarts,
          rss: h.rss,
          heapUsed: h.heapUsed,
          eld: h.eventLoopDelayP99Ms,
          elu: h.eventLoopUtilization,
          inFlight: h.inFlight,
          served: h.served,
          handed: w.connectionsHanded,
          poolQueue: h.poolQueue,
          webSockets: h.webSockets,
          idleShed: h.idleShed,
          fdExhausted: h.fdExhausted === true,
          session: w.session ? { store: w.session.store, available: w.session.available !== false } : null
        }
      })
    }
  }

  // Sampled from the start, page or no page: a page opened after an incident (a reload, a
  // kill -9) shows the last 5 minutes, not only what happened while it was open.
  function tick () {
    const snap = snapshot()
    snapshots.push(snap)
    while (snapshots.length > MAX_SNAPSHOTS || (snapshots.length > 0 && snapshots[0].t < snap.t - HISTORY_MS)) snapshots.shift()
    historyJson = null
    broadcast('snapshot', snap)
  }

  function broadcast (name, data) {
    if (clients.size === 0) return
    clients.broadcast(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`)
    if (clients.size === 0) stopKeepAlive()
  }

  function startSampling () {
    tick()
    timer = setInterval(tick, intervalMs)
    timer.unref()
  }

  function startKeepAlive () {
    if (keepAlive) return
    keepAlive = setInterval(() => clients.broadcast(': keep-alive\n\n'), KEEPALIVE_MS)
    keepAlive.unref()
  }

  function stopKeepAlive () {
    clearInterval(keepAlive)
    keepAlive = null
  }

  function serveEvents (req, res) {
    const refusal = clients.admit(req)
    if (refusal) {
      debug('dashboard stream refused: %s', refusal.message.trim())
      res.writeHead(refusal.status, { 'Content-Type': 'text/plain', 'Cache-Control': 'no-store', 'Retry-After': String(refusal.retryAfter) })
      return res.end(refusal.message)
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store', Connection: 'keep-alive', 'X-Accel-Buffering': 'no' })
    clients.add(res, req)
    const latest = snapshots.length ? snapshots[snapshots.length - 1] : null
    clients.write(res, `event: hello\ndata: ${JSON.stringify({ controls: Boolean(probes.controlToken), intervalMs, events: events.slice(-HELLO_EVENTS), snapshot: latest })}\n\n`)
    debug('page connected (%d open)', clients.size)
    startKeepAlive()
    res.on('close', function onPageClosed () {
      clients.remove(res)
      debug('page closed (%d open)', clients.size)
      if (clients.size === 0) stopKeepAlive()
    })
  }

  /** The rings, for a page that has just connected (one response, not a stream). */
  function serveHistory (req, res) {
    const address = req.socket.remoteAddress || 'unknown'
    const retryAfter = historyRate.take(address, Date.now())
    if (retryAfter > 0) {
      historyRefused++
      debug('dashboard history refused to %s', address)
      res.writeHead(429, { 'Content-Type': 'text/plain', 'Cache-Control': 'no-store', 'Retry-After': String(retryAfter) })
      return res.end(`too many dashboard history requests from ${address} (probes.streamsPerMinute is ${limits.streamsPerMinute})\n`)
    }
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' })
    if (historyJson === null) historyJson = JSON.stringify({ events, snapshots })
    res.end(historyJson)
  }

  function servePage (res) {
    if (page === null) {
      try {
        page = fs.readFileSync(path.join(__dirname, 'page.html'))
      } catch (err) {
        // Out of descriptors (EMFILE) the primary must answer, not throw.
        return send(res, 503, `dashboard page unavailable (${err.code || err.message}); try again\n`)
      }
    }
    res.writeHead(200, {
      'Content-Type': 'text/html; charset=utf-8',
      'Cache-Control': 'no-store',
      // Everything is inline; nothing may be loaded from elsewhere.
      'Content-Security-Policy': "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
      'X-Frame-Options': 'DENY'
    })
    res.end(page)
  }

  async function serveReload (req, res) {
    if (!probes.controlToken) return send(res, 403, 'control is off: set probes.controlToken to allow reloads from the dashboard\n')
    if (!sameToken(req.headers['x-clusterize-token'], probes.controlToken)) return send(res, 401, 'wrong or missing X-Clusterize-Token header\n')
    const result = await options.reload()
    res.writeHead(result.ok ? 200 : 409, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' })
    res.end(JSON.stringify(result))
  }

  /** A view token, when set, may come as a Bearer header or (for EventSource) in the query. */
  function mayView (req, url) {
    if (!probes.token) return true
    const header = String(req.headers.authorization || '')
    const given = header.startsWith('Bearer ') ? header.slice(7) : new URL(url, 'http://x').searchParams.get('token')
    return sameToken(given, probes.token)
  }

  startSampling()
  return {
    /**
     * Answer a probes request if it is the dashboard's.
     * @returns {boolean} whether it was
     */
    route (req, res) {
      const url = req.url
      const pathname = url.split('?')[0]
      if (pathname === '/control/reload' && req.method === 'POST') {
        serveReload(req, res).catch((err) => send(res, 500, err.message + '\n'))
        return true
      }
      if (pathname !== '/dashboard' && pathname !== '/dashboard/events' && pathname !== '/dashboard/history') return false
      if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed\n') || true
      if (!mayView(req, url)) return send(res, 401, 'this dashboard needs its token (probes.token): ?token=... or Authorization: Bearer ...\n') || true
      if (pathname === '/dashboard') servePage(res)
      else if (pathname === '/dashboard/history') serveHistory(req, res)
      else serveEvents(req, res)
      return true
    },
    /** Open pages (for tests and the cost bench). */
    get clients () { return clients.size },
    /**
     * Open streams, streams closed for not reading, new ones refused (cap or rate), and
     * history requests refused (rate): in /stats and /metrics.
     */
    get streams () { return { open: clients.size, evicted: clients.evicted, refused: clients.refused, historyRefused } },
    close () {
      clearInterval(timer)
      stopKeepAlive()
      for (const [name, listener] of Object.entries(listeners)) handle.removeListener(name, listener)
      clients.endAll()
    }
  }
}

/** Long strings cut to MAX_TEXT characters, one level deep (lifecycle data is flat). */
function clip (data) {
  const out = {}
  for (const [key, value] of Object.entries(data || {})) {
    out[key] = typeof value === 'string' && value.length > MAX_TEXT ? value.slice(0, MAX_TEXT) + '...' : value
  }
  return out
}

function pickDefined (object, keys) {
  const out = {}
  for (const key of keys) if (object && object[key] !== undefined) out[key] = object[key]
  return out
}

function sameToken (given, expected) {
  if (typeof given !== 'string') return false
  const a = crypto.createHash('sha256').update(given).digest()
  const b = crypto.createHash('sha256').update(expected).digest()
  return crypto.timingSafeEqual(a, b)
}

function send (res, status, body) {
  res.writeHead(status, { 'Content-Type': 'text/plain', 'Cache-Control': 'no-store' })
  res.end(body)
}

module.exports = { createDashboard }
