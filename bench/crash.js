'use strict'

/**
 * bench/crash.js: kill -9 of a worker under light load, repeated, side by
 * side: clusterize without and with a warm spare (`spare: 1`), raw
 * node:cluster re-forking on 'exit', and PM2 cluster mode. For each kill:
 * the time from the kill until a new worker process answers a request (new
 * connection per probe, every 2 ms), and the requests that failed.
 *
 *   node bench/crash.js [--kills 5] [--gap-ms 1500] [--concurrency 4]
 *
 * Loopback only, ~1.5 min, stops everything it started by PID, PM2 by `pm2 kill`.
 */

const http = require('http')
const os = require('os')
const { numberArg: arg, isQuick } = require('./lib/args')
const { startLocal, startPm2 } = require('./lib/contenders')
const { runClientLoop, requestTimeoutArg } = require('./lib/load')
const { fmt, median, ratio, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, sleep } = require('./lib/proc')

const KILLS = arg('--kills', 5, 2)
const GAP_MS = arg('--gap-ms', 1500, 500)
/** Before the first kill; load kept on after the last recovery. */
const SETTLE_MS = isQuick() ? 500 : 1500
const TAIL_MS = isQuick() ? 700 : 2000
const CONCURRENCY = arg('--concurrency', 4)
const REQUEST_TIMEOUT_MS = requestTimeoutArg()
const WORKERS = os.availableParallelism()

/** GET / on a new connection: the answering pid, or null. */
function probe (port) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/', agent: false, timeout: 2000 }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => {
        try { resolve(JSON.parse(body).pid) } catch { resolve(null) }
      })
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(null))
  })
}

/** Pids that answer a few dozen requests: the workers in rotation (a spare never answers). */
async function servingPids (port) {
  const pids = new Set()
  for (let i = 0; i < 40; i++) {
    const pid = await probe(port)
    if (pid) pids.add(pid)
  }
  return pids
}

/**
 * Kill a serving worker, then send a probe on a new connection every 2 ms
 * (without waiting for earlier ones: a connection handed to the dead worker
 * may hang) until one is answered by a process that was not serving before.
 * @returns {Promise<number>} ms from the kill to that answer
 */
async function killAndTime (contender) {
  const before = await servingPids(contender.port)
  const victim = Array.from(before)[0]
  const killedAt = performance.now()
  process.kill(victim, 'SIGKILL')
  return new Promise((resolve) => {
    let done = false
    const finish = (value) => {
      if (done) return
      done = true
      clearInterval(timer)
      clearTimeout(giveUp)
      resolve(value)
    }
    const timer = setInterval(() => {
      probe(contender.port).then((pid) => {
        if (pid && !before.has(pid)) finish(performance.now() - killedAt)
      })
    }, 2)
    const giveUp = setTimeout(() => finish(Infinity), 15000)
  })
}

async function measure (start) {
  let contender = null
  try {
    contender = await start()
    await sleep(SETTLE_MS)
    // The load ends TAIL_MS after the last recovery; durationMs is only its cap.
    const done = new AbortController()
    const load = runClientLoop({ port: contender.port, concurrency: CONCURRENCY, durationMs: KILLS * (GAP_MS + 1500) + TAIL_MS, signal: done.signal, timeoutMs: REQUEST_TIMEOUT_MS })
    const times = []
    for (let i = 0; i < KILLS; i++) {
      await sleep(GAP_MS)
      times.push(await killAndTime(contender))
    }
    await sleep(TAIL_MS)
    done.abort()
    const result = await load
    const failed = result.samples.filter((s) => !s.ok).length
    return {
      label: contender.label,
      times,
      failed,
      total: result.samples.length,
      errors: Object.entries(result.errors).map(([k, v]) => `${k} ${v}`).join(', ') || '-'
    }
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
    await measure(() => startLocal('cluster', { label: 'raw node:cluster (fork on exit)' })),
    await measure(() => startLocal('clusterize', { label: 'clusterize', options: { restart: { maxCrashes: 50 } } })),
    await measure(() => startLocal('clusterize', { label: 'clusterize, spare: 1', options: { spare: 1, restart: { maxCrashes: 50 } } })),
    await measure(() => startPm2({ instances: WORKERS, label: 'PM2 cluster mode' }))
  ].filter(Boolean)
  const raw = rows[0]
  console.log(`## Crash recovery: kill -9 of a serving worker, ${KILLS} times, ${GAP_MS / 1000} s apart (${WORKERS} workers)\n`)
  console.log(machineLine())
  console.log(`\n"to serving" = from the kill until a request on a new connection is answered by a process that was not serving before (a probe every 2 ms, each on its own connection, not waiting for earlier ones). ${CONCURRENCY} keep-alive client loops run meanwhile; "failed" counts their failed requests (the killed worker's open connections are reset in every design; a request unanswered after ${REQUEST_TIMEOUT_MS / 1000} s fails as ETIMEDOUT). clusterize's restart backoff grows with consecutive failures of a slot; a spare skips it.\n`)
  console.log(markdownTable(
    ['contender', 'to serving, median ms', 'min ms', 'max ms', 'vs raw (median)', 'each kill ms', 'requests', 'failed', 'failure kinds'],
    rows.map((r) => [r.label, fmt(median(r.times), 1), fmt(Math.min(...r.times), 1), fmt(Math.max(...r.times), 1), ratio(median(r.times), median(raw.times)), r.times.map((t) => fmt(t, 0)).join(' / '), fmt(r.total), fmt(r.failed), r.errors])))
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
