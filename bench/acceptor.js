'use strict'

/**
 * bench/acceptor.js: a new connection per request (`wrk -H 'Connection:
 * close'`), so every request passes through the primary's acceptor:
 * clusterize 'rr' and 'balanced' against raw node:cluster's round robin,
 * side by side, order rotated every round. Also reads the primary's CPU time from /proc to give
 * its cost per handed-off connection and the connection rate at which the
 * primary would saturate one core (the ceiling of any primary-accepts
 * design on a big machine).
 *
 *   node bench/acceptor.js [--rounds 5] [--seconds 5] [--connections 32]
 *
 * Needs wrk (Debian package `wrk`). Loopback only, ~1 min, stops every
 * process it started by PID.
 */

const { numberArg: arg } = require('./lib/args')
const { startLocal } = require('./lib/contenders')
const { median, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, cpuMs, sleep } = require('./lib/proc')
const { wrkClose } = require('./lib/wrk')

const ROUNDS = arg('--rounds', 5, 2)
const SECONDS = arg('--seconds', 5, 1)
const CONNECTIONS = arg('--connections', 32)

const CONTENDERS = [
  { label: 'raw node:cluster (Node round robin)', kind: 'cluster' },
  { label: "clusterize 'rr'", kind: 'clusterize', options: { scheduling: 'rr' } },
  { label: "clusterize 'balanced'", kind: 'clusterize', options: { scheduling: 'balanced' } }
]

function wrk (port) {
  return wrkClose({ port, connections: CONNECTIONS, seconds: SECONDS })
}

async function round (spec) {
  const contender = await startLocal(spec.kind, { label: spec.label, options: spec.options })
  try {
    await sleep(500)
    const cpuBefore = cpuMs(contender.proc.pid)
    const result = await wrk(contender.port)
    const primaryCpuMs = cpuMs(contender.proc.pid) - cpuBefore
    return Object.assign(result, { usPerConnection: (primaryCpuMs * 1000) / result.total })
  } finally {
    await contender.stop()
  }
}

async function main () {
  installCleanup()
  const results = CONTENDERS.map(() => [])
  for (let r = 0; r < ROUNDS; r++) {
    // Rotated: each contender leads in turn.
    for (let k = 0; k < CONTENDERS.length; k++) {
      const i = (k + r) % CONTENDERS.length
      results[i].push(await round(CONTENDERS[i]))
    }
  }
  const summary = results.map((runs, i) => ({
    label: CONTENDERS[i].label,
    rps: median(runs.map((x) => x.rps)),
    p99: median(runs.map((x) => x.p99)),
    us: median(runs.map((x) => x.usPerConnection)),
    failed: runs.reduce((a, x) => a + x.failed, 0)
  }))
  const raw = summary[0]
  console.log(`## New connection per request: the primary's acceptor ('rr' and 'balanced' vs Node's round robin)\n`)
  console.log(machineLine())
  console.log(`\nwrk -t1 -c${CONNECTIONS} -d${SECONDS}s -H 'Connection: close' against GET / on the hello app (2 workers), ${ROUNDS} rounds alternating order, medians. ` +
    "Primary CPU from /proc (10 ms ticks) over the run, divided by requests: its cost per handed-off connection; 'ceiling' = 1 s / that cost, the new-connection rate at which the primary would use one whole core. " +
    'wrk and the servers share 2 cores.\n')
  console.log(markdownTable(
    ['contender', 'req/s', 'vs raw', 'p99 ms', 'p99 vs raw', 'primary CPU per connection (us)', 'vs raw', 'primary ceiling (conn/s)', 'failed'],
    summary.map((s) => [s.label, fmt(s.rps), ratio(s.rps, raw.rps), fmt(s.p99, 1), ratio(s.p99, raw.p99), fmt(s.us, 1), ratio(s.us, raw.us), s.us > 0 ? fmt(1e6 / s.us) : 'none (no per-connection work)', s.failed])))
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
