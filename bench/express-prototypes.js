'use strict'

/**
 * bench/express-prototypes.js: what a worker's server costs Express per
 * request, side by side in one run, one process each (no cluster, so only
 * the server differs):
 *   - the anchor: Express as every app starts it, http.createServer(app);
 *   - clusterize's worker server (lib/worker/load-app.js): on V8 before 13.6
 *     it builds req and res on app.request and app.response
 *     (lib/worker/express-prototypes.js), on later V8 it is the anchor;
 *   - the prototypes forced whatever the V8: what the version gate avoids.
 * GET / on the hello app, wrk keep-alive, rotated rounds, medians; p99; CPU
 * per request from /proc. `--node <bin>` (repeatable) runs the same rows on
 * other Node binaries in the same run; without it, this process's Node.
 *
 *   node bench/express-prototypes.js [--quick] [--rounds 4] [--seconds 3] [--connections 20] [--node /path/to/node ...]
 *
 * Needs wrk (Debian package `wrk`). Loopback only, ~1 min per Node line,
 * stops every process it started by PID.
 */

const http = require('http')
const { numberArg: arg, isQuick } = require('./lib/args')
const { median, sameRoundMedian, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, startProcess, waitForLine, stopProcess, cpuMs, freePort, sleep } = require('./lib/proc')
const { rotated } = require('./lib/rounds')
const { hasWrk, wrkRun } = require('./lib/wrk')

const ROUNDS = arg('--rounds', 4, 2)
const SECONDS = arg('--seconds', 3, 1)
const CONNECTIONS = arg('--connections', 20)
const WARM_UP_SECONDS = 1

const ROWS = [
  { mode: 'plain', label: 'Express as apps start it: http.createServer(app)', anchor: true },
  { mode: 'clusterize', label: "clusterize's worker server (loadApp)" },
  { mode: 'forced', label: 'prototypes forced (whatever the V8)' }
]

if (process.argv[2] === '--serve') {
  serve(process.argv[3], Number(process.argv[4])).catch((err) => {
    process.stderr.write(err.stack + '\n')
    process.exit(1)
  })
} else if (require.main === module) {
  main().catch((err) => {
    process.stderr.write(err.stack + '\n')
    process.exitCode = 1
  })
}

async function serve (mode, port) {
  const { createApp } = require('./lib/apps')
  const app = createApp('hello')
  let server
  if (mode === 'plain') server = http.createServer(app)
  else if (mode === 'forced') server = http.createServer(require('../lib/worker/express-prototypes').expressServerOptions(app, { force: true }), app)
  else server = (await require('../lib/worker/load-app').loadApp(() => app)).server
  server.keepAliveTimeout = 65000
  server.listen(port, '127.0.0.1', () => {
    const { slowPrototypeSwap } = require('../lib/worker/express-prototypes')
    process.stdout.write(`READY ${process.version} ${process.versions.v8} ${slowPrototypeSwap()}\n`)
  })
  process.on('SIGTERM', () => server.close(() => process.exit(0)))
}

function nodeArgs () {
  const nodes = []
  process.argv.forEach((value, i) => { if (value === '--node') nodes.push(process.argv[i + 1]) })
  return nodes.length > 0 ? nodes : [process.execPath]
}

async function start (node, row) {
  const port = await freePort()
  const proc = startProcess({ node, args: [__filename, '--serve', row.mode, String(port)], name: row.label })
  const line = await waitForLine(proc, /^READY /, 15000)
  const [, version, v8, slow] = line.split(' ')
  await wrkRun({ port, connections: CONNECTIONS, seconds: WARM_UP_SECONDS })
  return { row, proc, port, version, v8, slow: slow === 'true' }
}

async function measureLine (node) {
  const servers = []
  for (const row of ROWS) servers.push(await start(node, row))
  const results = new Map(servers.map((s) => [s.row.mode, []]))
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const server of rotated(servers, round)) {
        const cpuBefore = cpuMs(server.proc.pid)
        const r = await wrkRun({ port: server.port, connections: CONNECTIONS, seconds: SECONDS })
        r.usPerRequest = (cpuMs(server.proc.pid) - cpuBefore) * 1000 / r.total
        results.get(server.row.mode).push(r)
        process.stderr.write(`${server.version} round ${round + 1} ${server.row.mode}: ${Math.round(r.rps)} req/s p99 ${r.p99} ms\n`)
        await sleep(isQuick() ? 100 : 300)
      }
    }
  } finally {
    await Promise.all(servers.map((s) => stopProcess(s.proc)))
  }
  return { servers, results }
}

function lineTable ({ servers, results }) {
  const anchorRuns = results.get('plain')
  const anchor = { rps: median(anchorRuns.map((r) => r.rps)), p99: median(anchorRuns.map((r) => r.p99)), us: median(anchorRuns.map((r) => r.usPerRequest)) }
  const first = servers[0]
  const rows = servers.map((s) => {
    const runs = results.get(s.row.mode)
    const rps = median(runs.map((r) => r.rps))
    const p99 = median(runs.map((r) => r.p99))
    const us = median(runs.map((r) => r.usPerRequest))
    const sameRound = sameRoundMedian(runs, anchorRuns, (r) => r.rps)
    const label = s.row.mode === 'clusterize' ? `${s.row.label}: ${first.slow ? 'prototypes set' : 'as the anchor'}` : s.row.label
    return [label, fmt(rps), ratio(rps, anchor.rps), `${fmt(sameRound, 2)}x`, fmt(p99, 2), ratio(p99, anchor.p99), fmt(us, 1), ratio(us, anchor.us),
      runs.map((r) => fmt(r.rps)).join(' / '), runs.reduce((a, r) => a + r.failed, 0)]
  })
  return `##### Node ${first.version} (V8 ${first.v8}: ${first.slow ? 'before 13.6, swapped prototypes are slow' : '13.6 or later, the swap is fast'})\n\n` +
    markdownTable(['server', 'req/s (median)', 'vs anchor', 'median of same-round ratios', 'p99 ms', 'p99 vs anchor', 'CPU µs/req', 'CPU vs anchor', 'req/s per round', 'errors + non-2xx'], rows)
}

async function main () {
  installCleanup()
  if (!hasWrk()) throw new Error('bench/express-prototypes.js needs wrk (apt-get install wrk)')
  const lines = []
  for (const node of nodeArgs()) lines.push(await measureLine(node))
  console.log('### Express\'s prototype swap: the worker server against http.createServer(app)\n')
  console.log(machineLine())
  console.log(`\nGET / on the hello app (Express 5), one process per row, wrk -t1 -c${CONNECTIONS} keep-alive, ${ROUNDS} rounds x ${SECONDS} s, order rotated each round; medians. ` +
    'CPU per request: the server process\'s CPU time from /proc (10 ms ticks) over each round, divided by its requests. wrk shares the 2 cores.\n')
  for (const line of lines) console.log(lineTable(line) + '\n')
}
