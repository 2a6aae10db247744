'use strict'

/**
 * bench/many-cores.js: the measured inputs of the many-core model
 * (bench/README.md, "Many cores"), and the model's table from them.
 *
 * This box has 2 cores; users run 16-64. What limits each mode as cores grow
 * is measured here per connection, on 2 workers, with wrk `Connection: close`
 * (a new TCP connection per request):
 *   - the primary's CPU per new connection (utime+stime of its threads, from
 *     /proc schedstat, over the run): for 'rr' the primary accepts and hands
 *     every connection over, so one core of primary serves at most
 *     1e6 / (its us per connection) connections a second;
 *   - the workers' CPU per new connection (the same, summed over workers):
 *     what one more worker core adds;
 *   - the primary's IPC system calls per connection (strace -c -f, load
 *     minus an idle run of the same length; where strace may attach): for
 *     'balanced' the share protocol's messages (LOAD reports, SHARE limits)
 *     against 'rr''s one handle send per connection;
 *   - accept-queue behaviour: 4 workers, one of them blocked in a handler
 *     for BLOCK_MS, 100 new connections (10 at a time): how many wait for it.
 *     With 'reuseport' each worker has its own queue and the kernel hashes
 *     a connection to a queue without looking at the worker, so about 1/N
 *     wait; with 'balanced' and 'rr' a blocked worker takes none.
 *
 *   node bench/many-cores.js [--seconds 3] [--rounds 3]
 *
 * Loopback only, ~2 min, stops every process it started by PID. Measures,
 * then computes; it asserts nothing.
 */

const fs = require('fs')
const os = require('os')
const path = require('path')
const http = require('http')
const { spawn, spawnSync } = require('child_process')
const { numberArg: arg } = require('./lib/args')
const { startLocal } = require('./lib/contenders')
const { median, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { rotated } = require('./lib/rounds')
const { installCleanup, node24, sleep, threadsCpuMs, childrenOf } = require('./lib/proc')
const { hasWrk, wrkClose, wrkSeconds } = require('./lib/wrk')

const SECONDS = arg('--seconds', 3, 1)
const ROUNDS = arg('--rounds', 3, 2)
const CONNECTIONS = 50
const BLOCK_MS = 2000
const QUEUE_CONNECTIONS = 100
const NODE = node24() || process.execPath
const MODES = ['rr', 'balanced', 'reuseport']
const CORES = [2, 4, 8, 16, 32, 64]

/** CPU (ms) of the primary and of its workers so far. */
function cpuSplit (c) {
  const primary = threadsCpuMs(c.proc.pid)
  const workers = childrenOf(c.proc.pid).reduce((sum, pid) => sum + (threadsCpuMs(pid) || 0), 0)
  return { primary, workers }
}

/** CPU (ms per second) the primary and the workers use with no traffic: heartbeats, timers. */
async function idleRate (c) {
  const before = cpuSplit(c)
  const started = performance.now()
  await sleep(2000)
  const after = cpuSplit(c)
  const seconds = (performance.now() - started) / 1000
  return { primary: (after.primary - before.primary) / seconds, workers: (after.workers - before.workers) / seconds }
}

/** CPU per new connection, what the service does with no traffic taken off. */
async function perConnection (c, idle) {
  const before = cpuSplit(c)
  const started = performance.now()
  const r = await wrkClose({ port: c.port, connections: CONNECTIONS, seconds: SECONDS })
  const after = cpuSplit(c)
  const seconds = (performance.now() - started) / 1000
  return {
    rps: r.rps,
    primaryUs: Math.max(0, after.primary - before.primary - idle.primary * seconds) * 1000 / r.total,
    workersUs: Math.max(0, after.workers - before.workers - idle.workers * seconds) * 1000 / r.total,
    connections: r.total
  }
}

function canStrace () {
  const probe = spawnSync('strace', ['-V'])
  return !probe.error && probe.status === 0
}

/** strace -c -f on `pid` while `during()` runs; the calls per syscall. Null when strace cannot attach. */
async function straceCounts (pid, during) {
  const out = path.join(os.tmpdir(), `cz-strace-${process.pid}-${pid}-${Date.now()}.txt`)
  const tracer = spawn('strace', ['-c', '-f', '-e', 'trace=read,write,readv,writev,recvmsg,sendmsg', '-o', out, '-p', String(pid)], { stdio: 'ignore' })
  await sleep(500) // attached
  try {
    await during()
  } finally {
    tracer.kill('SIGINT')
    await new Promise((resolve) => tracer.once('exit', resolve))
  }
  try {
    const counts = {}
    for (const line of fs.readFileSync(out, 'utf8').split('\n')) {
      const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line)
      if (m) counts[m[2]] = Number(m[1])
    }
    return counts
  } catch {
    return null
  } finally {
    fs.rmSync(out, { force: true })
  }
}

function totalCalls (counts) {
  return counts ? Object.values(counts).reduce((a, b) => a + b, 0) : NaN
}

/** IPC system calls the primary makes per new connection: (load - idle of the same length) / connections. */
async function syscallsPerConnection (c) {
  let connections = 0
  const load = await straceCounts(c.proc.pid, async () => {
    connections = (await wrkClose({ port: c.port, connections: CONNECTIONS, seconds: SECONDS })).total
  })
  const idle = await straceCounts(c.proc.pid, () => sleep(wrkSeconds(SECONDS) * 1000))
  if (!load || !idle) return NaN
  return (totalCalls(load) - totalCalls(idle)) / connections
}

function get (port, pathname) {
  const started = performance.now()
  return new Promise((resolve) => {
    http.get({ host: '127.0.0.1', port, path: pathname, agent: false }, (res) => {
      res.resume()
      res.on('end', () => resolve(performance.now() - started))
    }).on('error', () => resolve(NaN))
  })
}

/** One worker blocked BLOCK_MS; how many of 100 new connections (10 at a time) wait for it. */
async function stuckBehindOne (c) {
  const blocked = get(c.port, '/cpu')
  await sleep(200) // it is in the handler
  const times = []
  let next = 0
  await Promise.all(Array.from({ length: 10 }, async () => {
    while (next < QUEUE_CONNECTIONS) {
      next++
      times.push(await get(c.port, '/'))
    }
  }))
  await blocked
  return times.filter((ms) => !(ms < BLOCK_MS / 4)).length
}

async function main () {
  installCleanup()
  if (!hasWrk()) throw new Error('bench/many-cores.js needs wrk (Debian/Ubuntu package `wrk`)')
  const contenders = []
  const rows = new Map()
  try {
    for (const mode of MODES) contenders.push(await startLocal('clusterize', { node: NODE, label: mode, options: { workers: 2, scheduling: mode } }))
    for (const c of contenders) await wrkClose({ port: c.port, connections: CONNECTIONS, seconds: 1 })
    for (const c of contenders) rows.set(c.label, { runs: [], idle: await idleRate(c) })
    for (let round = 0; round < ROUNDS; round++) {
      for (const c of rotated(contenders, round)) rows.get(c.label).runs.push(await perConnection(c, rows.get(c.label).idle))
    }
    const tracing = canStrace()
    for (const c of contenders) rows.get(c.label).syscalls = tracing ? await syscallsPerConnection(c) : NaN
  } finally {
    await Promise.all(contenders.map((c) => c.stop()))
    contenders.length = 0
  }
  try {
    for (const mode of MODES) {
      contenders.push(await startLocal('clusterize', { node: NODE, app: 'mixed', label: mode, env: { BENCH_BLOCK_MS: String(BLOCK_MS) }, options: { workers: 4, scheduling: mode } }))
    }
    for (const c of contenders) rows.get(c.label).stuck = await stuckBehindOne(c)
  } finally {
    await Promise.all(contenders.map((c) => c.stop()))
  }

  const inputs = MODES.map((mode) => {
    const r = rows.get(mode)
    const m = (key) => median(r.runs.map((run) => run[key]))
    return { mode, rps: m('rps'), primaryUs: m('primaryUs'), workersUs: m('workersUs'), syscalls: r.syscalls, stuck: r.stuck }
  })
  console.log('## Many cores: the measured inputs, and where each mode saturates\n')
  console.log(machineLine(`servers on ${NODE === process.execPath ? process.version : 'Node 24'}`))
  console.log(`1-minute load average at the end: ${os.loadavg()[0].toFixed(1)} on ${os.availableParallelism()} cores.\n`)
  console.log(`2 workers, wrk -t1 -c${CONNECTIONS} -H 'Connection: close' ${wrkSeconds(SECONDS)} s, ${ROUNDS} rounds rotated, medians. CPU from /proc/<pid>/task/*/schedstat (ns) before and after each run, less what the same processes use idle over as long (heartbeats, timers; measured 2 s per mode), divided by the connections wrk completed. ` +
    `IPC syscalls: strace -c -f on the primary (read/write/readv/writev/recvmsg/sendmsg), a load run minus an idle run of the same length, per connection (a read can carry several messages; strace slows the primary, not the count). ` +
    `Stuck: 4 workers, one blocked ${BLOCK_MS} ms in GET /cpu, ${QUEUE_CONNECTIONS} new connections 10 at a time, counted when slower than ${BLOCK_MS / 4} ms.\n`)
  console.log(markdownTable(['mode', 'new conn req/s (2 workers)', 'primary CPU per conn (us)', 'workers CPU per conn (us)', 'primary IPC syscalls per conn', `stuck behind 1 blocked worker of 4 (of ${QUEUE_CONNECTIONS})`],
    inputs.map((i) => [`'${i.mode}'`, fmt(i.rps), fmt(i.primaryUs, 1), fmt(i.workersUs, 1), fmt(i.syscalls, 2), i.stuck])))
  console.log('\n### The model: new connections a second with N cores (one worker per core; the primary shares them)\n')
  console.log('One worker core serves 1e6 / (workers us per conn) new connections a second; the primary serves at most 1e6 / (primary us per conn) on its one thread, ' +
    'and its CPU comes off the workers\'. So with N cores: min(N * 1e6 / (workers us + primary us), 1e6 / primary us). "saturated" = the primary\'s ceiling is the limit. ' +
    'No load generator on the same cores, no memory-bandwidth or NIC limit: an upper bound of what each mode allows, not a prediction of a box.\n')
  const header = ['mode'].concat(CORES.map((n) => `${n} cores`)).concat(['the primary saturates from'])
  const modelRows = inputs.map((i) => modelRow(`'${i.mode}'`, i, null))
  const balanced = inputs.find((i) => i.mode === 'balanced')
  if (balanced && balanced.syscalls > 0) modelRows.splice(2, 0, modelRow("'balanced', reports charged per second", balanced, balanced.primaryUs / balanced.syscalls))
  console.log(markdownTable(header, modelRows))
  console.log(`\n"charged per second": the workers' LOAD reports are spaced so the whole cluster sends about 1,000 a second, plus one quiet report per worker every 100 ms and a limit message back at most per report: at most ${MESSAGES_PER_SECOND} + ${MESSAGES_PER_WORKER} x N messages a second, each costing the primary its measured CPU per IPC syscall. The plain 'balanced' row charges it per connection instead (what it measured at 2 workers), an upper bound.`)
}

/** Messages a second a 'balanced' primary handles at most, whatever the connection rate: ~1,000 LOAD + as many SHARE, plus per worker 10 quiet LOAD and 1 heartbeat. */
const MESSAGES_PER_SECOND = 2000
const MESSAGES_PER_WORKER = 11

/**
 * New connections a second per core count. `usPerMessage` (balanced): the
 * primary's cost is capped per second rather than charged per connection.
 */
function modelRow (label, i, usPerMessage) {
  const perCore = 1e6 / (i.workersUs + i.primaryUs)
  const ceiling = i.primaryUs > 0 ? 1e6 / i.primaryUs : Infinity
  let from = Number.isFinite(ceiling) ? `${fmt(ceiling / perCore, 0)} cores` : 'never'
  const cells = CORES.map((n) => {
    if (usPerMessage !== null) {
      const capCores = (MESSAGES_PER_SECOND + MESSAGES_PER_WORKER * n) * usPerMessage / 1e6
      const linear = n * perCore
      if (linear * i.primaryUs / 1e6 <= capCores) return fmt(linear)
      if (capCores >= 1) return fmt(Math.min(linear, ceiling)) + ' (saturated)'
      return fmt((n - capCores) * 1e6 / i.workersUs)
    }
    const rate = Math.min(n * perCore, ceiling)
    return fmt(rate) + (n * perCore > ceiling ? ' (saturated)' : '')
  })
  if (usPerMessage !== null) {
    const atMost = CORES[CORES.length - 1]
    const cores = (MESSAGES_PER_SECOND + MESSAGES_PER_WORKER * atMost) * usPerMessage / 1e6
    from = cores >= 1 ? 'at its message cap' : `never (${fmt(cores, 2)} of a core at ${atMost} workers)`
  }
  return [label].concat(cells, [from])
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
