'use strict'

/**
 * The live dashboard on the probes server: GET /dashboard (one
 * self-contained page), GET /dashboard/events (Server-Sent Events) and
 * POST /control/reload (only with a control token, sent in a header).
 *
 * Lifecycle events (worker ready/exit, reloads, crash loop, session store)
 * are kept in a small ring at all times: they are rare. Snapshots of the
 * workers are taken only while at least one page is open, once per
 * heartbeat interval; with no page open the dashboard does no work.
 */

const crypto = require('crypto')
const fs = require('fs')
const path = require('path')
const debug = require('debug')('clusterize:dashboard')

const MAX_EVENTS = 200
const MAX_SNAPSHOTS = 300
const KEEPALIVE_MS = 15000

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
  const clients = new Set()
  const events = []
  const snapshots = []
  let timer = null
  let keepAlive = null
  let page = null

  const record = (type, data) => {
    const event = Object.assign({ t: Date.now(), type }, data)
    events.push(event)
    if (events.length > MAX_EVENTS) events.shift()
    broadcast('lifecycle', event)
  }
  const listeners = {
    'worker:ready': (w) => record('worker-ready', { id: w.id, pid: w.pid, generation: w.generation, state: w.state }),
    'worker:exit': (e) => record('worker-exit', { id: e.id, pid: e.pid, generation: e.generation, reason: e.reason, code: e.code, signal: e.signal }),
    'reload:start': (r) => record('reload-start', { generation: r.generation }),
    'reload:done': (r) => record('reload-done', { ok: r.ok, rolledBack: r.rolledBack, reason: r.reason, durationMs: r.durationMs, generation: r.generation, replaced: r.replaced }),
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

  function tick () {
    const snap = snapshot()
    snapshots.push(snap)
    if (snapshots.length > MAX_SNAPSHOTS) snapshots.shift()
    broadcast('snapshot', snap)
  }

  function broadcast (name, data) {
    if (clients.size === 0) return
    const frame = `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`
    for (const res of clients) res.write(frame)
  }

  function startTicking () {
    if (timer) return
    tick()
    timer = setInterval(tick, intervalMs)
    timer.unref()
    keepAlive = setInterval(() => { for (const res of clients) res.write(': keep-alive\n\n') }, KEEPALIVE_MS)
    keepAlive.unref()
  }

  function stopTicking () {
    clearInterval(timer)
    clearInterval(keepAlive)
    timer = null
    keepAlive = null
  }

  function serveEvents (req, res) {
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store', Connection: 'keep-alive', 'X-Accel-Buffering': 'no' })
    res.write(`event: hello\ndata: ${JSON.stringify({ controls: Boolean(probes.controlToken), intervalMs, events, snapshots })}\n\n`)
    clients.add(res)
    debug('page connected (%d open)', clients.size)
    startTicking()
    req.on('close', function onPageClosed () {
      clients.delete(res)
      debug('page closed (%d open)', clients.size)
      if (clients.size === 0) stopTicking()
    })
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
      if (pathname !== '/dashboard' && pathname !== '/dashboard/events') return false
      if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed\n') || true
      if (!mayView(req, url)) return send(res, 401, 'this dashboard needs its token (probes.token): ?token=... or Authorization: Bearer ...\n') || true
      if (pathname === '/dashboard') servePage(res)
      else serveEvents(req, res)
      return true
    },
    /** Open pages (for tests and the cost bench). */
    get clients () { return clients.size },
    close () {
      stopTicking()
      for (const [name, listener] of Object.entries(listeners)) handle.removeListener(name, listener)
      for (const res of clients) res.end()
      clients.clear()
    }
  }
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
