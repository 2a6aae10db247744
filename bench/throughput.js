'use strict'

/**
 * bench/throughput.js: GET / on the hello app, side by side in one run:
 * a single process, the textbook node:cluster server, clusterize (no
 * scheduling option: the default mode) and PM2 cluster mode. Rounds are interleaved (order rotates each
 * round) and the median per contender is reported, with ratios against raw
 * node:cluster; then the same with a new connection every 2 requests (the
 * acceptor on the path); then CPU per request and idle RSS from /proc.
 *
 *   node bench/throughput.js [--rounds 5] [--seconds 4] [--connections 50] [--rate 1500]
 *
 * Loopback only, ~90 s, stops every process it started by PID and PM2 by
 * `pm2 kill` with a private PM2_HOME. It measures; it never asserts.
 */

const { numberArg: arg, isQuick } = require('./lib/args')
const os = require('os')
const { startLocal, startPm2 } = require('./lib/contenders')
const { runAutocannon } = require('./lib/load')
const { median, sameRoundMedian, ratio, times, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, sleep, cpuMs } = require('./lib/proc')

const ROUNDS = arg('--rounds', 5, 2)
const SECONDS = arg('--seconds', 4, 0.5)
const CONNECTIONS = arg('--connections', 50)
const WORKERS = os.availableParallelism()
const BASELINE = 'raw node:cluster'
const FIXED_RATE = arg('--rate', 1500)
const FIXED_SECONDS = arg('--fixed-seconds', 5, 1)
const RECONNECT_EVERY = 2
const CPU_ROUNDS = arg('--cpu-rounds', 3, 1)
const WARM_UP_SECONDS = isQuick() ? 0.5 : 2

async function startAll () {
  // Started together (their start-up is not measured); in this order in every table.
  const pm2 = startPm2({ instances: WORKERS, label: 'PM2 cluster mode' }).catch((err) => {
    console.error(`PM2 skipped: ${err.message}`)
    return null
  })
  const contenders = await Promise.all([
    startLocal('single', { label: 'single process' }),
    startLocal('cluster', { label: BASELINE }),
    // No scheduling option: what a user gets ('balanced' on Linux with Node >= 22.12, else 'rr'); READY names it.
    startLocal('clusterize', { label: 'clusterize' }).then((c) => Object.assign(c, { label: `clusterize (default: '${c.readyLine.split(' ')[2]}')` }))
  ]).catch(async (err) => {
    const started = await pm2
    if (started) await started.stop()
    throw err
  })
  const started = await pm2
  if (started) contenders.push(started)
  return contenders
}

/**
 * @param {object[]} contenders
 * @param {number} [reconnectRate] open a new connection every this many requests
 *   (autocannon 8 records nothing with 1), so the acceptor is on the path
 */
async function measure (contenders, reconnectRate) {
  const results = new Map(contenders.map((c) => [c.label, []]))
  for (let round = 0; round < ROUNDS; round++) {
    const order = contenders.map((_, i) => contenders[(i + round) % contenders.length])
    for (const contender of order) {
      const r = await runAutocannon({ port: contender.port, connections: CONNECTIONS, durationSec: SECONDS, reconnectRate })
      results.get(contender.label).push(r)
      process.stderr.write(`round ${round + 1} ${contender.label}${reconnectRate ? ' (new connections)' : ''}: ${Math.round(r.rps)} req/s p99 ${r.p99} ms\n`)
      await sleep(isQuick() ? 100 : 500)
    }
  }
  return results
}

function throughputTable (contenders, results) {
  const summary = new Map()
  const baseRuns = results.get(BASELINE)
  for (const c of contenders) {
    const runs = results.get(c.label)
    summary.set(c.label, {
      // Same-round ratios cancel slow drift in background load.
      pairedRatio: sameRoundMedian(runs, baseRuns, (r) => r.rps),
      rps: median(runs.map((r) => r.rps)),
      p50: median(runs.map((r) => r.p50)),
      p99: median(runs.map((r) => r.p99)),
      failed: runs.reduce((n, r) => n + r.errors + r.non2xx, 0),
      all: runs.map((r) => Math.round(r.rps)).join(' / ')
    })
  }
  const base = summary.get(BASELINE)
  const rows = contenders.map((c) => {
    const s = summary.get(c.label)
    return [c.label, fmt(s.rps), ratio(s.rps, base.rps), times(s.pairedRatio), fmt(s.p50), fmt(s.p99), ratio(s.p99, base.p99), s.all, s.failed]
  })
  return markdownTable(['GET / (hello app)', 'req/s (median)', 'vs raw cluster', 'median of per-round ratios', 'p50 ms', 'p99 ms', 'p99 vs raw', 'req/s per round', 'failed'], rows)
}

/**
 * CPU cost per request at a fixed request rate every contender can sustain:
 * far less sensitive to other load on the machine than peak req/s.
 */
async function cpuPerRequest (contenders) {
  const samples = new Map(contenders.map((c) => [c.label, []]))
  // Rotated rounds, medians: one pass in a fixed order favours whoever runs last (warmer JIT, quieter box).
  for (let round = 0; round < CPU_ROUNDS; round++) {
    const order = contenders.map((_, i) => contenders[(i + round) % contenders.length])
    for (const c of order) {
      const pids = await c.allPids()
      const before = pids.map(cpuMs)
      const r = await runAutocannon({ port: c.port, connections: 20, durationSec: FIXED_SECONDS, overallRate: FIXED_RATE })
      const after = pids.map(cpuMs)
      const requests = r.rps * FIXED_SECONDS
      const primaryUs = ((after[0] - before[0]) * 1000) / requests
      let workerMs = 0
      for (let i = 1; i < pids.length; i++) workerMs += after[i] - before[i]
      const workersUs = pids.length > 1 ? (workerMs * 1000) / requests : NaN
      const totalUs = c.label === 'single process' ? primaryUs : primaryUs + workersUs
      samples.get(c.label).push({ primaryUs, workersUs, totalUs, p99: r.p99 })
    }
  }
  const rows = contenders.map((c) => {
    const runs = samples.get(c.label)
    const m = (key) => median(runs.map((r) => r[key]))
    return { c, primaryUs: m('primaryUs'), workersUs: m('workersUs'), totalUs: m('totalUs'), p99: m('p99') }
  })
  const base = rows.find((r) => r.c.label === BASELINE).totalUs
  return markdownTable(
    [`CPU per request at ${FIXED_RATE} req/s (median of ${CPU_ROUNDS})`, 'primary / daemon us', 'workers us', 'total us', 'total vs raw', 'p99 ms'],
    rows.map((r) => [r.c.label, fmt(r.primaryUs, 1), fmt(r.workersUs, 1), fmt(r.totalUs, 1), ratio(r.totalUs, base), fmt(r.p99)]))
}

async function memoryTable (contenders) {
  const rows = []
  let baseWorker = NaN
  for (const c of contenders) {
    const mem = await c.memory()
    const perWorker = mem.workers.length ? mem.workers.reduce((a, b) => a + b, 0) / mem.workers.length : NaN
    if (c.label === BASELINE) baseWorker = perWorker
    rows.push({ c, mem, perWorker })
  }
  return markdownTable(
    ['idle RSS after warm-up', 'primary / daemon MiB', 'workers', 'per-worker MiB (mean)', 'per worker vs raw', 'total MiB'],
    rows.map(({ c, mem, perWorker }) => {
      const total = (mem.primary || 0) + mem.workers.reduce((a, b) => a + b, 0)
      const delta = Number.isFinite(perWorker) && Number.isFinite(baseWorker) ? (perWorker - baseWorker >= 0 ? '+' : '') + fmt(perWorker - baseWorker, 1) + ' MiB' : 'n/a'
      return [c.label, fmt(mem.primary, 1), mem.workers.length || '(none)', fmt(perWorker, 1), c.label === 'single process' ? 'n/a' : delta, fmt(total, 1)]
    }))
}

async function main () {
  installCleanup()
  const loadAtStart = require('fs').readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')
  const contenders = await startAll()
  try {
    for (const c of contenders) await runAutocannon({ port: c.port, connections: CONNECTIONS, durationSec: WARM_UP_SECONDS })
    await sleep(WARM_UP_SECONDS * 1000)
    const memory = await memoryTable(contenders)
    const results = await measure(contenders)
    // --quick leaves new connections to acceptor.js and scheduling.js, which measure them with wrk in the same run.
    const reconnecting = isQuick() ? null : await measure(contenders, RECONNECT_EVERY)
    const cpu = await cpuPerRequest(contenders)
    console.log(`## Throughput: GET / on the hello app (${WORKERS} workers each)\n`)
    console.log(machineLine(`load average at start ${loadAtStart}`))
    console.log(`\nautocannon in the bench process, ${CONNECTIONS} keep-alive connections, ${ROUNDS} rounds x ${SECONDS} s per contender, order rotated each round; medians. ` +
      `The load generator runs on the same ${os.availableParallelism()} cores as the servers, so absolute numbers are low and ratios are what matter. ` +
      'All contenders stay up during the run (idle ones cost ~nothing).\n')
    console.log(throughputTable(contenders, results))
    if (reconnecting !== null) {
      console.log(`\n### New connections: a new connection every ${RECONNECT_EVERY} requests (the primary's acceptor is on the path)\n`)
      console.log(throughputTable(contenders, reconnecting))
    }
    console.log(`\n### CPU cost per request (user + system time from /proc over ${FIXED_SECONDS} s at a fixed ${FIXED_RATE} req/s, 20 connections; 10 ms tick resolution)\n`)
    console.log(cpu)
    console.log('\n### Memory (VmRSS from /proc, idle after warm-up)\n')
    console.log(memory)
  } finally {
    await Promise.all(contenders.map((c) => c.stop()))
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
