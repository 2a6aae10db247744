'use strict'

/**
 * bench/metrics.js: what a Prometheus scrape of the app's metrics costs.
 * 2 workers, 50 app metrics in each (a few histograms, see
 * lib/metrics-app.js): clusterize's probes /metrics (the app's metrics
 * aggregated, plus clusterize's own) vs prom-client's AggregatorRegistry in
 * a hand-written raw node:cluster primary (the anchor). Scrapes one after
 * another on a keep-alive connection; latency p50/p99 and the primary's CPU
 * per scrape (from /proc, 10 ms ticks, over the whole run). Rounds alternate
 * the order; medians are reported.
 *
 *   node bench/metrics.js [--quick] [--rounds 3] [--scrapes 300]
 *
 * Loopback only, ~30 s, stops every process it started by PID.
 */

const http = require('http')
const os = require('os')
const { numberArg: arg } = require('./lib/args')
const { median, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, startProcess, waitForLine, stopProcess, cpuMs, sleep } = require('./lib/proc')
const { cpuSample, otherWorkLine } = require('./lib/other-load')
const { otherWorkLabel } = require('./lib/results')

// --quick (npm run bench -- --quick): fewer rounds and scrapes.
const QUICK = process.argv.includes('--quick')
const ROUNDS = arg('--rounds', QUICK ? 2 : 3)
const SCRAPES = arg('--scrapes', QUICK ? 50 : 300)

const CONTENDERS = [
  { label: 'prom-client AggregatorRegistry, raw node:cluster (anchor)', mode: 'anchor' },
  { label: 'clusterize probes /metrics', mode: 'clusterize' },
  { label: 'clusterize, metrics: false (its own metrics only, for reference)', mode: 'clusterize-own' }
]

function scrapeOnce (port, agent) {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint()
    const req = http.get({ host: '127.0.0.1', port, path: '/metrics', agent }, (res) => {
      let bytes = 0
      res.on('data', (chunk) => { bytes += chunk.length })
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`/metrics answered ${res.statusCode}`))
        resolve({ ms: Number(process.hrtime.bigint() - started) / 1e6, bytes })
      })
    })
    req.on('error', reject)
    req.setTimeout(10000, () => req.destroy(new Error('scrape timed out')))
  })
}

function percentile (sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}

async function measure (contender) {
  const proc = startProcess({ args: ['bench/lib/metrics-app.js', contender.mode], name: contender.label })
  try {
    const line = await waitForLine(proc, /^READY /, 30000)
    const metricsPort = Number(line.split(' ')[2])
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    // Warm-up: prom-client loaded, first reports in, JIT warm.
    await sleep(1500)
    for (let i = 0; i < 30; i++) await scrapeOnce(metricsPort, agent)
    const times = []
    let bytes = 0
    const before = cpuMs(proc.pid)
    for (let i = 0; i < SCRAPES; i++) {
      const result = await scrapeOnce(metricsPort, agent)
      times.push(result.ms)
      bytes = result.bytes
    }
    const used = cpuMs(proc.pid) - before
    agent.destroy()
    times.sort((a, b) => a - b)
    return { p50: percentile(times, 50), p99: percentile(times, 99), cpuPerScrape: used / SCRAPES, bytes }
  } finally {
    await stopProcess(proc)
  }
}

async function main () {
  installCleanup()
  const load = os.loadavg().map((value) => value.toFixed(2)).join(' ')
  const cpuBefore = cpuSample()
  const runs = CONTENDERS.map(() => [])
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? [0, 1, 2] : [2, 1, 0]
    for (const i of order) runs[i].push(await measure(CONTENDERS[i]))
  }
  const rows = CONTENDERS.map((contender, i) => ({
    label: contender.label,
    p50: median(runs[i].map((r) => r.p50)),
    p99: median(runs[i].map((r) => r.p99)),
    cpu: median(runs[i].map((r) => r.cpuPerScrape)),
    bytes: median(runs[i].map((r) => r.bytes)),
    perRound: runs[i].map((r) => fmt(r.p50, 2)).join(' / ')
  }))
  console.log(`## Scrape cost: 2 workers, 50 app metrics each (${SCRAPES} scrapes per round, ${ROUNDS} rounds, medians)\n`)
  console.log(machineLine(`load average at start ${load}`))
  const other = otherWorkLine(cpuBefore, cpuSample(), os.availableParallelism(), otherWorkLabel)
  console.log(`\n${other ? other[0].toUpperCase() + other.slice(1) + '.' : 'What other work used meanwhile is not known here.'} Read the ratios rather than the absolute times. ` +
    'Scrapes run one after another on one keep-alive connection. clusterize\'s response also carries its own metrics (workers, exits, bus...). ' +
    'Primary CPU is user + system from /proc over all scrapes of a round, divided by their count (10 ms ticks).\n')
  console.log(markdownTable(
    ['contender', 'p50 ms', 'p99 ms', 'p50 vs anchor', 'p99 vs anchor', 'primary CPU ms / scrape', 'CPU vs anchor', 'bytes', 'p50 per round'],
    rows.map((r) => [r.label, fmt(r.p50, 2), fmt(r.p99, 2), ratio(r.p50, rows[0].p50), ratio(r.p99, rows[0].p99), fmt(r.cpu, 3), ratio(r.cpu, rows[0].cpu), fmt(r.bytes), r.perRound])))
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
