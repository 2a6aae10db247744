'use strict'

/**
 * bench/scheduling.js: clusterize's scheduling modes side by side, against
 * raw node:cluster (the anchor).
 *
 * 1. GET / on the hello app with raw node:cluster, 'rr', 'none', 'balanced'
 *    and (on Node >= 22.12) 'reuseport': keep-alive req/s (autocannon), and
 *    new-connection req/s with a new connection per request (wrk
 *    `Connection: close`; without wrk, autocannon reconnecting every 2nd
 *    request), with the primary's CPU per new connection read from /proc.
 *    Servers run on this Node and, when installed, on Node 24 (reuseport
 *    needs it; with --quick, on Node 24 only); each row names its Node.
 * 2. Balance: 100 keep-alive connections opened at once against 4 workers;
 *    how many each worker got, per round, and max/min.
 * 3. A mixed workload, a new connection per request, 1 request in 20 hitting
 *    GET /cpu (blocks ~50 ms): p99 of the light requests for raw node:cluster
 *    (the anchor), 'rr' with its defaults, 'rr' with an aggressive
 *    maxEventLoopDelayMs 20, 'none', 'balanced' and 'reuseport'.
 *
 *   node bench/scheduling.js [--rounds 3] [--seconds 2.5] [--mixed-seconds 6] [--mixed-rounds 2] [--balance-rounds 5]
 *
 * Loopback only, ~5 min, stops every process it started by PID. Measures only.
 */

const { numberArg: arg, isQuick } = require('./lib/args')
const { startLocal } = require('./lib/contenders')
const { runAutocannon, runClientLoop, percentile } = require('./lib/load')
const { median, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const http = require('http')
const { installCleanup, node24, sleep, cpuMs } = require('./lib/proc')
const { BLOCK_MS } = require('./lib/apps')
const { hasWrk, wrkClose, wrkSeconds } = require('./lib/wrk')

const ROUNDS = arg('--rounds', 3, 2)
const SECONDS = arg('--seconds', 2.5, 0.6)
const MIXED_SECONDS = arg('--mixed-seconds', 6, 0.6)
const MIXED_ROUNDS = arg('--mixed-rounds', 2, 2)
const CONNECTIONS = 50
const MIXED_CONCURRENCY = 16
const HEAVY_EVERY = 20
const BALANCE_ROUNDS = arg('--balance-rounds', 5, 2)
/** Warm-up per contender and the pause between two measured runs. */
const WARM_UP_MS = arg('--warm-up-ms', 1000, 200)
const PAUSE_MS = arg('--pause-ms', 300, 100)
const BALANCE_WORKERS = 4
const BALANCE_CONNECTIONS = 100

let serverNodes = null

/**
 * The Node binaries to run servers with: this one, plus Node 24 if present.
 * With --quick only one: Node 24 if present (it has every mode), else this one.
 */
function nodes () {
  if (serverNodes !== null) return serverNodes
  const list = [{ bin: process.execPath, version: process.version }]
  const other = node24()
  if (other && other !== process.execPath) {
    const version = require('child_process').execFileSync(other, ['-v'], { encoding: 'utf8' }).trim()
    if (version !== process.version) list.push({ bin: other, version })
  }
  serverNodes = isQuick() ? list.slice(-1) : list
  return serverNodes
}

/** The rows' order within one Node (contenders start together, in any order). */
const MODE_ORDER = ['raw', 'rr', 'none', 'balanced', 'reuseport']

function supportsReusePort (version) {
  const [major, minor] = version.slice(1).split('.').map(Number)
  return major > 23 || (major === 23 && minor >= 1) || (major === 22 && minor >= 12)
}

/** Run `fn(contender)` for each contender, `rounds` times, order rotated. */
async function interleave (contenders, rounds, fn) {
  const results = new Map(contenders.map((c) => [c.label, []]))
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < contenders.length; i++) {
      const c = contenders[(i + round) % contenders.length]
      results.get(c.label).push(await fn(c))
      await sleep(PAUSE_MS)
    }
  }
  return results
}

/** New-connection req/s and the primary's CPU per new connection. */
async function newConnections (c) {
  const before = cpuMs(c.proc.pid)
  const result = hasWrk()
    ? await wrkClose({ port: c.port, connections: CONNECTIONS, seconds: SECONDS })
    : await runAutocannon({ port: c.port, connections: CONNECTIONS, durationSec: SECONDS, reconnectRate: 2 })
  const primaryMs = cpuMs(c.proc.pid) - before
  const connections = hasWrk() ? result.total : result.rps * SECONDS / 2
  return { rps: result.rps, p99: result.p99, failed: hasWrk() ? result.failed : result.errors + result.non2xx, usPerConnection: primaryMs * 1000 / connections }
}

async function throughputPart () {
  const contenders = []
  try {
    for (const [nodeIndex, node] of nodes().entries()) {
      const modes = supportsReusePort(node.version) ? ['rr', 'none', 'balanced', 'reuseport'] : ['rr', 'none', 'balanced']
      // Started together (start-up is not measured); pushed as each starts, so a failure still stops the others.
      await Promise.all(['raw'].concat(modes).map(async (mode) => {
        const c = mode === 'raw'
          ? await startLocal('cluster', { node: node.bin, label: `raw node:cluster (Node ${node.version})` })
          : await startLocal('clusterize', { node: node.bin, label: `'${mode}' (Node ${node.version})`, options: { scheduling: mode } })
        c.node = node.version
        c.mode = mode
        c.order = nodeIndex * MODE_ORDER.length + MODE_ORDER.indexOf(mode)
        contenders.push(c)
      }))
    }
    contenders.sort((a, b) => a.order - b.order)
    for (const c of contenders) await runAutocannon({ port: c.port, durationSec: WARM_UP_MS / 1000 })
    const keepAlive = await interleave(contenders, ROUNDS, (c) => runAutocannon({ port: c.port, connections: CONNECTIONS, durationSec: SECONDS }))
    const perConnection = await interleave(contenders, ROUNDS, newConnections)
    const rows = contenders.map((c) => {
      const base = contenders.find((b) => b.node === c.node && b.mode === 'raw')
      const m = (map, label, key) => median(map.get(label).map((r) => r[key]))
      const failed = keepAlive.get(c.label).reduce((n, r) => n + r.errors + r.non2xx, 0) + perConnection.get(c.label).reduce((n, r) => n + r.failed, 0)
      return [c.label,
        fmt(m(keepAlive, c.label, 'rps')), ratio(m(keepAlive, c.label, 'rps'), m(keepAlive, base.label, 'rps')), fmt(m(keepAlive, c.label, 'p99')),
        fmt(m(perConnection, c.label, 'rps')), ratio(m(perConnection, c.label, 'rps'), m(perConnection, base.label, 'rps')), fmt(m(perConnection, c.label, 'p99'), 1),
        fmt(m(perConnection, c.label, 'usPerConnection'), 1),
        failed]
    })
    return markdownTable(['scheduling (server Node)', 'keep-alive req/s', 'vs raw', 'keep-alive p99 ms', 'new conn req/s', 'vs raw', 'new conn p99 ms', 'primary CPU per new conn (us)', 'failed'], rows)
  } finally {
    await Promise.all(contenders.map((c) => c.stop()))
  }
}

/** Open `n` keep-alive connections at once (n requests in parallel on one agent); how many each worker got. */
async function openAtOnce (c, n) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: n })
  try {
    const pids = await Promise.all(Array.from({ length: n }, () => new Promise((resolve, reject) => {
      http.get({ host: '127.0.0.1', port: c.port, path: '/', agent }, (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (chunk) => { body += chunk })
        res.on('end', () => resolve(JSON.parse(body).pid))
      }).on('error', reject)
    })))
    const counts = new Map(c.workerPids().map((pid) => [pid, 0]))
    for (const pid of pids) counts.set(pid, (counts.get(pid) || 0) + 1)
    return [...counts.values()].sort((a, b) => b - a)
  } finally {
    agent.destroy()
  }
}

async function balancePart () {
  const specs = [
    { kind: 'cluster', label: 'raw node:cluster (Node round robin)', env: { BENCH_WORKERS: String(BALANCE_WORKERS) } },
    { label: "'rr'", options: { scheduling: 'rr', workers: BALANCE_WORKERS } },
    { label: "'none'", options: { scheduling: 'none', workers: BALANCE_WORKERS } },
    { label: "'balanced'", options: { scheduling: 'balanced', workers: BALANCE_WORKERS } }
  ]
  const contenders = []
  try {
    await startTogether(specs, contenders, (spec) => startLocal(spec.kind || 'clusterize', { label: spec.label, options: spec.options, env: spec.env }))
    const results = await interleave(contenders, BALANCE_ROUNDS, (c) => openAtOnce(c, BALANCE_CONNECTIONS))
    return markdownTable(['scheduling', `connections per worker, each round (${BALANCE_ROUNDS} rounds)`, 'max/min, median', 'max/min, worst'],
      contenders.map((c) => {
        const rounds = results.get(c.label)
        const ratios = rounds.map((counts) => counts[counts.length - 1] > 0 ? counts[0] / counts[counts.length - 1] : Infinity)
        return [c.label, rounds.map((counts) => counts.join('/')).join(', '), fmtRatio(median(ratios)), fmtRatio(Math.max(...ratios))]
      }))
  } finally {
    await Promise.all(contenders.map((c) => c.stop()))
  }
}

/**
 * Start one contender per spec, all at once (start-up is not measured), into
 * `contenders` in the specs' order; each is in `started` as soon as it runs,
 * so the caller's cleanup stops it even when another failed to start.
 */
async function startTogether (specs, contenders, start) {
  const started = []
  try {
    await Promise.all(specs.map(async (spec, i) => {
      started[i] = await start(spec)
    }))
  } finally {
    for (const c of started) if (c) contenders.push(c)
  }
}

function fmtRatio (value) {
  return Number.isFinite(value) ? value.toFixed(2) : 'inf (a worker got none)'
}

function pickMixedPath (n) {
  return n % HEAVY_EVERY === HEAVY_EVERY - 1 ? '/cpu' : '/'
}

async function mixedPart () {
  const health = { heartbeatMs: 100, heartbeatTimeoutMs: 5000 }
  // The anchor is node:cluster's own round robin (free list: a worker gets a
  // new connection only after it took the previous one).
  const specs = [
    { kind: 'cluster', label: 'raw node:cluster (Node round robin)' },
    { label: "'rr' (default: hand-off acks, maxEventLoopDelayMs 500)", options: { scheduling: 'rr', health } },
    { label: "'rr' with maxEventLoopDelayMs 20", options: { scheduling: 'rr', health: Object.assign({ maxEventLoopDelayMs: 20 }, health) } },
    { label: "'none'", options: { scheduling: 'none', health } },
    { label: "'balanced'", options: { scheduling: 'balanced', health } }
  ]
  const newer = nodes().find((n) => supportsReusePort(n.version))
  if (newer) specs.push({ label: "'reuseport'", node: newer, options: { scheduling: 'reuseport', health } })
  const contenders = []
  try {
    await startTogether(specs, contenders, (spec) => {
      const node = spec.node || nodes()[0]
      return startLocal(spec.kind || 'clusterize', { node: node.bin, app: 'mixed', label: `${spec.label} (Node ${node.version})`, options: spec.options })
    })
    const run = (c) => runClientLoop({ port: c.port, concurrency: MIXED_CONCURRENCY, durationMs: MIXED_SECONDS * 1000, keepAlive: false, pickPath: pickMixedPath })
    for (const c of contenders) await runClientLoop({ port: c.port, concurrency: 4, durationMs: WARM_UP_MS, keepAlive: false, pickPath: pickMixedPath })
    const results = await interleave(contenders, MIXED_ROUNDS, run)
    const summary = contenders.map((c) => {
      const runs = results.get(c.label).map((r) => {
        const light = r.samples.filter((s) => s.ok && s.path === '/').map((s) => s.ms)
        const heavy = r.samples.filter((s) => s.ok && s.path === '/cpu').map((s) => s.ms)
        return {
          rps: r.samples.length / MIXED_SECONDS,
          lightP50: percentile(light, 50),
          lightP99: percentile(light, 99),
          heavyP99: percentile(heavy, 99),
          failed: r.samples.filter((s) => !s.ok).length
        }
      })
      const m = (key) => median(runs.map((r) => r[key]))
      return { label: c.label, rps: m('rps'), lightP50: m('lightP50'), lightP99: m('lightP99'), heavyP99: m('heavyP99'), failed: runs.reduce((n, r) => n + r.failed, 0) }
    })
    const anchor = summary[0]
    return markdownTable(['mixed workload', 'req/s', 'req/s vs raw cluster', 'light p50 ms', 'light p99 ms', 'light p99 vs raw cluster', `/cpu p99 ms`, 'failed'],
      summary.map((s) => [s.label, fmt(s.rps), ratio(s.rps, anchor.rps), fmt(s.lightP50, 1), fmt(s.lightP99, 1), ratio(s.lightP99, anchor.lightP99), fmt(s.heavyP99, 1), s.failed]))
  } finally {
    await Promise.all(contenders.map((c) => c.stop()))
  }
}

async function main () {
  installCleanup()
  const throughput = await throughputPart()
  const balance = await balancePart()
  const mixed = await mixedPart()
  console.log('## Scheduling modes (clusterize, 2 workers)\n')
  console.log(machineLine(`servers on ${nodes().map((n) => n.version).join(' and ')}`))
  console.log(`1-minute load average at the end: ${require('os').loadavg()[0].toFixed(1)} on ${require('os').availableParallelism()} cores.`)
  console.log(`\nGET / on the hello app, ${CONNECTIONS} connections, ${ROUNDS} rounds x ${SECONDS} s, order rotated, medians. Keep-alive: autocannon. ` +
    (hasWrk() ? `New conn: wrk -t1 -H 'Connection: close' (a new connection per request${SECONDS !== wrkSeconds(SECONDS) ? `, ${wrkSeconds(SECONDS)} s: wrk takes whole seconds` : ''}). ` : 'New conn: autocannon reconnecting after every 2nd request (wrk is not installed). ') +
    'Primary CPU per new connection: the primary\'s utime+stime from /proc (10 ms ticks) over the new-connection runs, divided by connections. ' +
    'Ratios are against raw node:cluster on the same Node. The load generator shares the cores with the servers.\n')
  console.log(throughput)
  console.log(`\n### Balance: ${BALANCE_CONNECTIONS} keep-alive connections opened at once, ${BALANCE_WORKERS} workers\n`)
  console.log(`One request on each of ${BALANCE_CONNECTIONS} connections opened together by one client (Node http agent); the answering pid counted per connection, most first.\n`)
  console.log(balance)
  console.log(`\n### Mixed workload: 1 request in ${HEAVY_EVERY} is GET /cpu (blocks ~${BLOCK_MS} ms)\n`)
  console.log(`${MIXED_CONCURRENCY} client loops, a new connection per request (keep-alive pins a client to one worker, so scheduling only acts on new connections), ` +
    `${MIXED_ROUNDS} rounds x ${MIXED_SECONDS} s, medians. health.heartbeatMs 100 for all rows.\n`)
  console.log(mixed)
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
