'use strict'

/**
 * A small HTTP server in the primary for orchestrators and people:
 * /live, /ready, /stats (JSON), /metrics (Prometheus), and the live
 * dashboard (/dashboard, see ./dashboard) when it is on.
 */

const crypto = require('crypto')
const http = require('http')
const { isLoopback } = require('../config')
const { descriptorOf } = require('./inherit')
const { explainListenError } = require('../errors')
const { guardProbeConnections } = require('./probe-connections')

/** How a probes port that is taken is named in the error. */
const PROBES_PORT = { what: 'probes port', option: 'option "probes.port", CLI --probes-port' }

/**
 * @param {{ port: number, host: string, fd?: number, token?: string, guardStats?: boolean, maxConnections?: number, log?: object }} options
 *   `fd`: an inherited listening socket to serve on instead of binding the port;
 *   `maxConnections`: probes connections open at once (see ./probe-connections.js)
 * @param {{ stats: Function, metrics: object, isLive: Function, isReady: Function, degradation: Function, dashboard?: object }} sources
 * @returns {Promise<{ port: number, close: () => Promise<void> }>}
 */
function startProbes (options, sources) {
  // A browser page on another site can point its own DNS name at 127.0.0.1
  // (DNS rebinding) and read a loopback server as same-origin; its requests
  // still carry that name in Host, so a loopback server answers only to
  // loopback names.
  const checkHost = isLoopback(options.host)
  let guard = null
  const server = http.createServer(function onProbe (req, res) {
    if (guard.refuseBody(req, res)) return
    if (checkHost && !isLoopbackHostHeader(req.headers.host)) {
      return send(res, 403, 'text/plain', 'this probes server answers only to Host: localhost, 127.x.x.x or [::1]\n')
    }
    if (sources.dashboard && sources.dashboard.route(req, res)) return
    const url = req.url.split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'method not allowed\n')
    if ((url === '/stats' || url === '/metrics') && options.guardStats && !hasToken(req, options.token)) {
      res.setHeader('WWW-Authenticate', 'Bearer')
      return send(res, 401, 'text/plain', `${url} needs the probes token: Authorization: Bearer <probes.token>\n`)
    }
    switch (url) {
      case '/live':
        return sources.isLive()
          ? send(res, 200, 'text/plain', 'ok\n')
          : send(res, 503, 'text/plain', 'crash loop: workers keep failing, see the logs\n')
      case '/ready': {
        // A dead shared dependency (Redis) stays visible here but does not
        // pull every instance out of the load balancer at once.
        const degraded = sources.degradation()
        if (!sources.isReady()) return send(res, 503, 'text/plain', 'not ready\n')
        return send(res, 200, 'text/plain', degraded ? `ready, degraded: ${degraded}\n` : 'ready\n')
      }
      case '/stats':
        return send(res, 200, 'application/json', JSON.stringify(sources.stats()))
      case '/metrics': {
        const query = metricsQuery(req.url)
        if (query === null) return send(res, 400, 'text/plain', '/metrics?worker=<id> takes a worker id (an integer)\n')
        return sources.metrics.render(query).then(
          (text) => send(res, 200, sources.metrics.contentType, text),
          (err) => send(res, err.status || 500, 'text/plain', err.message + '\n'))
      }
      default:
        return send(res, 404, 'text/plain', `not found: try /live, /ready, /stats${sources.dashboard ? ', /metrics or /dashboard' : ' or /metrics'}\n`)
    }
  })
  guard = guardProbeConnections(server, { maxConnections: options.maxConnections || 128, log: options.log })
  return new Promise((resolve, reject) => {
    server.once('error', (err) => reject(explainListenError(err, options.port, PROBES_PORT)))
    server.listen(options.fd !== undefined ? { fd: options.fd } : { port: options.port, host: options.host }, () => {
      server.removeAllListeners('error')
      resolve({
        port: server.address().port,
        /** Open probes connections, and those closed or refused for the bounds. */
        status: guard.status,
        descriptor: () => descriptorOf(server._handle),
        close: () => new Promise((resolve) => {
          if (sources.dashboard) sources.dashboard.close()
          server.close(() => resolve())
          server.closeAllConnections()
        })
      })
    })
  })
}

/**
 * Is a Host header (name, optional port) a loopback name? A request without
 * one (HTTP/1.0, a hand-made probe) is not from a browser and is let through.
 * @param {string|undefined} header
 * @returns {boolean}
 */
function isLoopbackHostHeader (header) {
  if (header === undefined) return true
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::\d{1,5})?$/.exec(header)
  return Boolean(match) && isLoopback(match[1])
}

/**
 * `/metrics?worker=N`: one worker's own app metrics, for debugging.
 * @returns {{ worker?: number }|null} null for a malformed worker id
 */
function metricsQuery (url) {
  const at = url.indexOf('?')
  if (at === -1) return {}
  const worker = new URLSearchParams(url.slice(at + 1)).get('worker')
  if (worker === null) return {}
  return /^\d{1,6}$/.test(worker) ? { worker: Number(worker) } : null
}

/** `Authorization: Bearer <token>`, compared in constant time. */
function hasToken (req, token) {
  const header = String(req.headers.authorization || '')
  if (!header.startsWith('Bearer ')) return false
  const a = crypto.createHash('sha256').update(header.slice(7)).digest()
  const b = crypto.createHash('sha256').update(token).digest()
  return crypto.timingSafeEqual(a, b)
}

function send (res, status, type, body) {
  res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store' })
  res.end(body)
}

module.exports = { startProbes, isLoopbackHostHeader }
