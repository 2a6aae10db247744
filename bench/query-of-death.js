'use strict'

/**
 * bench/query-of-death.js: a route that crashes the worker serving it (an
 * error thrown where Express cannot catch it), requested once every few
 * seconds while keep-alive and new-connection clients load the service, side
 * by side: raw node:cluster re-forking on 'exit', clusterize with its
 * defaults, and PM2 cluster mode. For each: the requests served and failed,
 * the crash requests sent, and whether the service still answers at the end
 * (a process manager whose safety machinery gives up is the outage).
 *
 *   node bench/query-of-death.js [--quick] [--seconds 60] [--period-ms 8000] [--concurrency 4]
 *
 * Loopback only, ~3.5 min (--quick: ~40 s), stops everything it started by PID, PM2 by `pm2 kill`.
 */

const http = require('http')
const os = require('os')
const { numberArg: arg } = require('./lib/args')
const { startLocal, startPm2 } = require('./lib/contenders')
const { runClientLoop, requestTimeoutArg } = require('./lib/load')
const { fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, sleep } = require('./lib/proc')

const SECONDS = arg('--seconds', 60, 10)
const PERIOD_MS = arg('--period-ms', 8000, 3000)
const CONCURRENCY = arg('--concurrency', 4)
const REQUEST_TIMEOUT_MS = requestTimeoutArg()
const WORKERS = os.availableParallelism()

/** GET `path` on a connection of its own: true when answered 2xx. */
function get (port, path) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: 3000 }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode >= 200 && res.statusCode < 300))
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(false))
  })
}

/** Up at the end: its manager runs and a request on a new connection is answered (a few tries). */
async function stillServing (contender) {
  if (!(await contender.isAlive())) return false
  for (let i = 0; i < 20; i++) {
    if (await get(contender.port, '/')) return true
    await sleep(250)
  }
  return false
}

async function measure (start) {
  let contender = null
  try {
    contender = await start()
    await sleep(1000)
    const durationMs = SECONDS * 1000
    const keepAlive = runClientLoop({ port: contender.port, concurrency: CONCURRENCY, durationMs, timeoutMs: REQUEST_TIMEOUT_MS })
    const fresh = runClientLoop({ port: contender.port, concurrency: Math.max(1, CONCURRENCY / 2), durationMs, keepAlive: false, timeoutMs: REQUEST_TIMEOUT_MS })
    let crashes = 0
    const stopAt = Date.now() + durationMs
    while (Date.now() + PERIOD_MS < stopAt) {
      await sleep(PERIOD_MS)
      crashes++
      get(contender.port, '/boom')
    }
    const [kept, opened] = await Promise.all([keepAlive, fresh])
    const up = await stillServing(contender)
    const count = (result) => ({ ok: result.samples.filter((s) => s.ok).length, failed: result.samples.filter((s) => !s.ok).length })
    const errors = Object.entries(Object.assign({}, kept.errors)).concat(Object.entries(opened.errors))
      .reduce((all, [k, v]) => { all[k] = (all[k] || 0) + v; return all }, {})
    return { label: contender.label, crashes, kept: count(kept), opened: count(opened), up, errors: Object.entries(errors).map(([k, v]) => `${k} ${v}`).join(', ') || '-' }
  } catch (err) {
    console.error(`skipped: ${err.message}`)
    return null
  } finally {
    if (contender) await contender.stop()
  }
}

async function main () {
  installCleanup()
  const rows = [
    await measure(() => startLocal('cluster', { app: 'qod', label: 'raw node:cluster (fork on exit)' })),
    await measure(() => startLocal('clusterize', { app: 'qod', label: 'clusterize (defaults)' })),
    await measure(() => startPm2({ app: 'qod', instances: WORKERS, label: 'PM2 cluster mode' }))
  ].filter(Boolean)
  console.log(`## Query of death: a route that crashes its worker, once every ${PERIOD_MS / 1000} s for ${SECONDS} s (${WORKERS} workers)\n`)
  console.log(machineLine())
  console.log(`\nGET /boom throws from a callback, so the worker process dies; it is requested on a connection of its own every ${PERIOD_MS / 1000} s (never answered, not counted below). Meanwhile ${CONCURRENCY} keep-alive client loops and ${Math.max(1, CONCURRENCY / 2)} new-connection loops send GET /; "failed" counts their connection errors, resets and non-2xx (requests in flight on a dying worker fail in every design; a refused connection fails at once, so a service that is down fails many). "serving at the end": the manager still runs and a new connection is answered. clusterize counts each crash of a worker that had stayed up restart.stableAfterMs (5 s) as a request-level fault: restarted at once, never counted by its crash-loop breaker.\n`)
  console.log(markdownTable(
    ['contender', 'crashes', 'keep-alive ok', 'keep-alive failed', 'new-connection ok', 'new-connection failed', 'serving at the end', 'failure kinds'],
    rows.map((r) => [r.label, fmt(r.crashes), fmt(r.kept.ok), fmt(r.kept.failed), fmt(r.opened.ok), fmt(r.opened.failed), r.up ? 'yes' : '**no**', r.errors])))
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
