'use strict'

/**
 * A bounded load generator for tests: `connections` clients on keep-alive
 * connections to 127.0.0.1, each sending one request after another until
 * `durationMs` passes or stop() is called. Every request's start time,
 * outcome and answering pid is recorded.
 */

const http = require('http')
const { eventually } = require('./wait')

/**
 * @param {{ port: number, path?: string, connections?: number, durationMs?: number, maxRequests?: number, paceMs?: number, localAddress?: string }} options
 *   paceMs: a pause between one answer and the next request on a connection (a fast Node
 *   would otherwise reach maxRequests before a long test is over)
 */
function startLoad (options) {
  const connections = options.connections || 8
  const deadline = Date.now() + (options.durationMs || 3000)
  const maxRequests = options.maxRequests || 200000
  const results = { ok: 0, failed: 0, non2xx: 0, failures: [], pids: new Map(), requests: [] }
  let stopped = false
  let sent = 0
  const agents = []

  function client () {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    agents.push(agent)
    return new Promise((resolve) => {
      (function next () {
        if (stopped || Date.now() >= deadline || sent >= maxRequests) return resolve()
        sent++
        const startedAt = Date.now()
        const req = http.get({ host: '127.0.0.1', port: options.port, path: options.path || '/', agent }, (res) => {
          let body = ''
          res.setEncoding('utf8')
          res.on('data', (chunk) => { body += chunk })
          res.on('end', () => {
            if (res.statusCode >= 200 && res.statusCode < 300) results.ok++
            else {
              results.non2xx++
              results.failures.push({ startedAt, status: res.statusCode, body: body.slice(0, 200) })
            }
            let pid = null
            try { pid = JSON.parse(body).pid } catch {}
            if (pid) results.pids.set(pid, (results.pids.get(pid) || 0) + 1)
            results.requests.push({ startedAt, pid, status: res.statusCode })
            if (options.paceMs) setTimeout(next, options.paceMs)
            else setImmediate(next)
          })
          res.on('error', onError)
        })
        function onError (err) {
          results.failed++
          results.failures.push({ startedAt, error: err.code || err.message })
          results.requests.push({ startedAt, error: err.code || err.message })
          setTimeout(next, 5)
        }
        req.on('error', onError)
        req.setTimeout(15000, () => req.destroy(new Error('request timed out')))
      })()
    })
  }

  const done = Promise.all(Array.from({ length: connections }, client)).then(() => {
    for (const agent of agents) agent.destroy()
    return results
  })
  return {
    done,
    results,
    /** Resolve once `count` more requests have succeeded (the load is flowing). */
    served (count) {
      const target = results.ok + count
      return eventually(() => {
        if (results.ok >= target || stopped) return true
        if (sent >= maxRequests) throw new Error(`the load sent its ${maxRequests} requests (maxRequests) before ${count} more succeeded: pace it (paceMs) or raise the cap`)
        return false
      }, { timeoutMs: 20000, intervalMs: 10, what: `${count} more successful requests` })
    },
    stop () {
      stopped = true
      return done
    }
  }
}

module.exports = { startLoad }
