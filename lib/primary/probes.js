'use strict'

/**
 * A small HTTP server in the primary for orchestrators and people:
 * /live, /ready, /stats (JSON), /metrics (Prometheus), and the live
 * dashboard (/dashboard, see ./dashboard) when it is on.
 */

const http = require('http')

/**
 * @param {{ port: number, host: string }} options
 * @param {{ stats: Function, metrics: object, isLive: Function, isReady: Function, degradation: Function, dashboard?: object }} sources
 * @returns {Promise<{ port: number, close: () => Promise<void> }>}
 */
function startProbes (options, sources) {
  const server = http.createServer(function onProbe (req, res) {
    if (sources.dashboard && sources.dashboard.route(req, res)) return
    const url = req.url.split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'method not allowed\n')
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
      case '/metrics':
        return sources.metrics.render().then(
          (text) => send(res, 200, sources.metrics.contentType, text),
          (err) => send(res, 500, 'text/plain', err.message + '\n'))
      default:
        return send(res, 404, 'text/plain', `not found: try /live, /ready, /stats${sources.dashboard ? ', /metrics or /dashboard' : ' or /metrics'}\n`)
    }
  })
  server.keepAliveTimeout = 5000
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen({ port: options.port, host: options.host }, () => {
      server.removeListener('error', reject)
      resolve({
        port: server.address().port,
        close: () => new Promise((resolve) => {
          if (sources.dashboard) sources.dashboard.close()
          server.close(() => resolve())
          server.closeAllConnections()
        })
      })
    })
  })
}

function send (res, status, type, body) {
  res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store' })
  res.end(body)
}

module.exports = { startProbes }
