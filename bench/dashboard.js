'use strict'

/**
 * bench/dashboard.js: what the live dashboard costs the primary. Three
 * clusterize primaries side by side (2 workers, heartbeats every 100 ms to
 * make any per-heartbeat work visible, light keep-alive load): probes with
 * the dashboard off, the dashboard on with no page open, and with one page
 * open (an SSE client reading /dashboard/events). Primary CPU from /proc.
 *
 *   node bench/dashboard.js [--rounds 3] [--seconds 10]
 *
 * Loopback only, ~1.5 min, stops every process it started by PID.
 */

const http = require('http')
const { numberArg: arg } = require('./lib/args')
const { startLocal } = require('./lib/contenders')
const { runClientLoop } = require('./lib/load')
const { median, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, cpuMs, sleep } = require('./lib/proc')

const ROUNDS = arg('--rounds', 3, 1)
const SECONDS = arg('--seconds', 10, 2)

const CASES = [
  { label: 'probes on, dashboard off', dashboard: false, page: false },
  { label: 'dashboard on, no page open', dashboard: true, page: false },
  { label: 'dashboard on, one page open', dashboard: true, page: true }
]

/** An SSE reader, as a browser's EventSource would be; returns a stop function. */
function openPage (port) {
  let bytes = 0
  const req = http.get({ host: '127.0.0.1', port, path: '/dashboard/events', agent: false }, (res) => {
    res.on('data', (chunk) => { bytes += chunk.length })
  })
  req.on('error', () => {})
  return () => {
    req.destroy()
    return bytes
  }
}

async function measure (spec) {
  const contender = await startLocal('clusterize', {
    label: spec.label,
    options: { health: { heartbeatMs: 100 }, probes: { port: 0, dashboard: spec.dashboard } }
  })
  try {
    const probesPort = Number(contender.readyLine.trim().split(' ')[3])
    await sleep(1000)
    const closePage = spec.page ? openPage(probesPort) : null
    await sleep(500)
    const before = cpuMs(contender.proc.pid)
    await runClientLoop({ port: contender.port, concurrency: 2, durationMs: SECONDS * 1000 })
    const used = cpuMs(contender.proc.pid) - before
    const bytes = closePage ? closePage() : 0
    return { cpuPercent: (100 * used) / (SECONDS * 1000), bytes }
  } finally {
    await contender.stop()
  }
}

async function main () {
  installCleanup()
  const runs = CASES.map(() => [])
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? [0, 1, 2] : [2, 1, 0]
    for (const i of order) runs[i].push(await measure(CASES[i]))
  }
  const rows = CASES.map((spec, i) => ({ label: spec.label, cpu: median(runs[i].map((r) => r.cpuPercent)), bytes: median(runs[i].map((r) => r.bytes)) }))
  console.log(`## Dashboard cost in the primary (2 workers, heartbeats every 100 ms, ${SECONDS} s, ${ROUNDS} rounds, medians)\n`)
  console.log(machineLine())
  console.log('\nPrimary CPU (user + system from /proc, 10 ms ticks) while 2 keep-alive client loops run; the page is an SSE client reading /dashboard/events.\n')
  console.log(markdownTable(
    ['primary', 'CPU % of one core', 'vs dashboard off', 'bytes sent to the page'],
    rows.map((r) => [r.label, fmt(r.cpu, 2), ratio(r.cpu, rows[0].cpu), fmt(r.bytes)])))
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
