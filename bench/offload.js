'use strict'

/**
 * bench/offload.js: our offload pool side by side with piscina, then a CPU
 * route inline vs offloaded while /health is sampled. Loopback only, bounded
 * in time (~60 s), closes everything it starts. Prints Markdown tables.
 *
 *   node bench/offload.js
 *
 * This file is also the trivial task module (both pools load it in their
 * threads) and the HTTP server child (`node bench/offload.js server <mode>`).
 */

/** The trivial task: piscina and our module task both call this export. */
module.exports = function trivial (n) {
  return n + 1
}

/** The CPU task for the piscina column of the HTTP part. */
module.exports.cpuTask = function cpuTask ([pw, iterations]) {
  return cpuWork(pw, iterations)
}

const QUICK = process.argv.includes('--quick')
const TASKS = QUICK ? 5000 : 20000
const ROUNDS = QUICK ? 1 : 3
const HTTP_SECONDS = QUICK ? 2 : 4
const CONNECTIONS = 8
const PBKDF2_ITERATIONS = 20000

/** pbkdf2 password hashing: the CPU route's work. */
function cpuWork (pw, iterations) {
  return require('node:crypto').pbkdf2Sync(pw, 'salt', iterations, 32, 'sha256').toString('hex')
}

async function batched (run) {
  const start = performance.now()
  const all = new Array(TASKS)
  for (let i = 0; i < TASKS; i++) all[i] = run(i)
  await Promise.all(all)
  return TASKS / ((performance.now() - start) / 1000)
}

async function serial (run) {
  const start = performance.now()
  for (let i = 0; i < TASKS; i++) await run(i)
  return TASKS / ((performance.now() - start) / 1000)
}

function median (values) {
  const sorted = values.slice().sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

async function poolOverhead (threads) {
  const { Piscina } = require('piscina')
  const offload = require('../middleware/offload')
  const ours = offload.pool({ threads, maxQueue: Infinity })
  const piscina = new Piscina({ filename: __filename, minThreads: threads, maxThreads: threads, idleTimeout: 60000 })
  const moduleTask = offload.task(__filename)
  const runners = {
    'ours (inline fn)': (i) => ours.run((n) => n + 1, i),
    'ours (module task)': (i) => ours.run(moduleTask, i),
    piscina: (i) => piscina.run(i)
  }
  const results = {}
  try {
    for (const run of Object.values(runners)) for (let i = 0; i < 2000; i++) await run(i) // warm up
    for (const name of Object.keys(runners)) results[name] = { batched: [], serial: [] }
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, run] of Object.entries(runners)) {
        results[name].batched.push(await batched(run))
        results[name].serial.push(await serial(run))
      }
    }
  } finally {
    await ours.close({ timeoutMs: 1000 })
    await piscina.destroy()
  }
  for (const r of Object.values(results)) {
    r.batched = median(r.batched)
    r.serial = median(r.serial)
  }
  return results
}

// ---------------------------------------------------------------- HTTP part

function runServer (mode) {
  const express = require('express')
  const offload = require('../middleware/offload')
  const { monitorEventLoopDelay } = require('node:perf_hooks')
  const app = express()
  let mw = null
  if (mode === 'offload' || mode === 'offload-nice0') {
    // offload-nice0: the same pool with threads at the event loop's priority
    mw = offload({ threads: Number(process.env.BENCH_THREADS), niceness: mode === 'offload-nice0' ? 0 : undefined })
    app.use(mw)
    app.get('/cpu', async (req, res) => {
      res.json(await req.offload((pw, it) => require('node:crypto').pbkdf2Sync(pw, 'salt', it, 32, 'sha256').toString('hex'), 'pw', PBKDF2_ITERATIONS))
    })
  } else if (mode === 'piscina') {
    const { Piscina } = require('piscina')
    const piscina = new Piscina({ filename: __filename, name: 'cpuTask', minThreads: Number(process.env.BENCH_THREADS), maxThreads: Number(process.env.BENCH_THREADS) })
    mw = { close: () => piscina.destroy() }
    app.get('/cpu', (req, res) => {
      piscina.run(['pw', PBKDF2_ITERATIONS]).then((hash) => res.json(hash), () => res.destroyed || res.status(500).end())
    })
  } else {
    app.get('/cpu', (req, res) => { res.json(cpuWork('pw', PBKDF2_ITERATIONS)) })
  }
  app.get('/health', (req, res) => { res.json({ ok: true }) })
  app.use(offload.errorHandler()) // answers offload errors; silent for clients that went away
  const histogram = monitorEventLoopDelay({ resolution: 10 })
  const { PerformanceObserver } = require('node:perf_hooks')
  let gcs = []
  const gcObserver = new PerformanceObserver((list) => { for (const e of list.getEntries()) gcs.push(e.duration) })
  let sched0 = null
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }))
  process.on('message', (msg) => {
    if (msg === 'start') {
      histogram.reset()
      histogram.enable()
      gcs = []
      gcObserver.observe({ entryTypes: ['gc'] })
      sched0 = mainThreadSchedstat()
    } else if (msg === 'stop') {
      histogram.disable()
      gcObserver.disconnect()
      const sched1 = mainThreadSchedstat()
      const waitMs = sched0 && sched1 ? (sched1.waitNs - sched0.waitNs) / 1e6 : NaN
      process.send({ loopP99: histogram.percentile(99) / 1e6, loopP50: histogram.percentile(50) / 1e6, runQueueMs: waitMs, gcMaxMs: gcs.length ? Math.max(...gcs) : 0 })
    } else if (msg === 'exit') {
      server.closeAllConnections()
      server.close()
      const done = mw ? mw.close({ timeoutMs: 1000 }) : Promise.resolve()
      done.then(() => process.exit(0))
    }
  })
}

/**
 * The event-loop thread's scheduler counters (Linux): ns on a CPU and ns
 * runnable but waiting for one. null elsewhere.
 */
function mainThreadSchedstat () {
  try {
    const [runNs, waitNs] = require('node:fs').readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').trim().split(' ').map(Number)
    return { runNs, waitNs }
  } catch {
    return null
  }
}

function startServer (mode, threads) {
  const { fork } = require('node:child_process')
  const child = fork(__filename, ['server', mode], { env: { ...process.env, BENCH_THREADS: String(threads), NODE_ENV: 'production' } })
  return new Promise((resolve, reject) => {
    child.once('message', (msg) => resolve({ child, port: msg.port }))
    child.once('error', reject)
    child.once('exit', (code) => reject(new Error(`bench server exited with code ${code}`)))
  })
}

function nextMessage (child) {
  return new Promise((resolve) => child.once('message', resolve))
}

async function sampleHealth (port, until) {
  const http = require('node:http')
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const latencies = []
  try {
    while (performance.now() < until) {
      const start = performance.now()
      await new Promise((resolve, reject) => {
        const req = http.get({ host: '127.0.0.1', port, path: '/health', agent }, (res) => {
          res.resume()
          res.on('end', resolve)
        })
        req.on('error', reject)
      })
      latencies.push(performance.now() - start)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  } finally {
    agent.destroy()
  }
  latencies.sort((a, b) => a - b)
  const pick = (q) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * q))]
  return { p50: pick(0.5), p99: pick(0.99), samples: latencies.length }
}

async function cpuRoute (mode, threads) {
  const autocannon = require('autocannon')
  const { child, port } = await startServer(mode, threads)
  try {
    await autocannon({ url: `http://127.0.0.1:${port}/cpu`, connections: 2, duration: 1 }) // warm up
    child.send('start')
    const until = performance.now() + HTTP_SECONDS * 1000
    const [load, health] = await Promise.all([
      autocannon({ url: `http://127.0.0.1:${port}/cpu`, connections: CONNECTIONS, duration: HTTP_SECONDS, timeout: 30 }),
      sampleHealth(port, until)
    ])
    const loopStats = nextMessage(child)
    child.send('stop')
    const loop = await loopStats
    return { rps: load.requests.total / HTTP_SECONDS, errors: load.errors + load.non2xx, health, loop }
  } finally {
    const exited = new Promise((resolve) => child.once('exit', resolve))
    child.send('exit')
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000)
    await exited
    clearTimeout(timer)
  }
}

/** Mean of each metric over runs of the same mode. */
function average (runs) {
  const mean = (get) => runs.reduce((sum, r) => sum + get(r), 0) / runs.length
  return {
    rps: mean((r) => r.rps),
    errors: mean((r) => r.errors),
    health: { p50: mean((r) => r.health.p50), p99: mean((r) => r.health.p99), samples: mean((r) => r.health.samples) },
    loop: { loopP99: mean((r) => r.loop.loopP99), runQueueMs: mean((r) => r.loop.runQueueMs), gcMaxMs: mean((r) => r.loop.gcMaxMs) }
  }
}

function fmt (n, digits = 0) {
  return Number(n).toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
}

async function main () {
  const os = require('node:os')
  const threads = Math.max(1, os.availableParallelism())
  const httpThreads = Number(process.env.BENCH_HTTP_THREADS) || threads
  const part = process.env.BENCH_PART || 'all'
  const started = performance.now()
  console.log(`# offload bench: Node ${process.version}, ${os.availableParallelism()} cores\n`)

  if (part === 'all' || part === 'pool') {
    const o = await poolOverhead(threads)
    const p = o.piscina
    console.log(`## Pool overhead: ${fmt(TASKS)} trivial tasks, ${threads} threads per pool (median of ${ROUNDS} rounds)\n`)
    console.log('| pool | batched tasks/s | vs piscina | one-at-a-time tasks/s | vs piscina |')
    console.log('|---|---:|---:|---:|---:|')
    for (const [name, r] of Object.entries(o)) {
      console.log(`| ${name} | ${fmt(r.batched)} | ${(r.batched / p.batched).toFixed(2)}x | ${fmt(r.serial)} | ${(r.serial / p.serial).toFixed(2)}x |`)
    }
  }

  if (part === 'all' || part === 'http') {
    // Two rounds in opposite orders, averaged: other load on the host drifts during the run (--quick: one).
    const runs = { inline: [], offload: [], 'offload-nice0': [], piscina: [] }
    const order = ['inline', 'offload', 'offload-nice0', 'piscina']
    for (const mode of QUICK ? order : order.concat(order.slice().reverse())) runs[mode].push(await cpuRoute(mode, httpThreads))
    const [inline, offloaded, nice0, piscina] = [runs.inline, runs.offload, runs['offload-nice0'], runs.piscina].map(average)
    console.log(`\n## CPU route (pbkdf2 ${fmt(PBKDF2_ITERATIONS)} iterations) in a single-process Express server, ${httpThreads} threads, ${CONNECTIONS} connections for ${HTTP_SECONDS} s, /health sampled every 20 ms (${QUICK ? 'one run each' : 'mean of 2 runs'})\n`)
    console.log('| metric | inline | offloaded (ours) | ours / inline | ours, niceness 0 | offloaded (piscina) | ours / piscina |')
    console.log('|---|---:|---:|---:|---:|---:|---:|')
    const row = (label, get, digits) => console.log(`| ${label} | ${fmt(get(inline), digits)} | ${fmt(get(offloaded), digits)} | ${(get(offloaded) / get(inline)).toFixed(2)}x | ${fmt(get(nice0), digits)} | ${fmt(get(piscina), digits)} | ${(get(offloaded) / get(piscina)).toFixed(2)}x |`)
    row('CPU route req/s', (r) => r.rps, 1)
    row('/health p50 ms', (r) => r.health.p50, 2)
    row('/health p99 ms', (r) => r.health.p99, 2)
    row('event-loop delay p99 ms', (r) => r.loop.loopP99, 2)
    row('event-loop thread waiting for a CPU, ms per s', (r) => r.loop.runQueueMs / HTTP_SECONDS, 0)
    row('longest GC pause ms (main thread)', (r) => r.loop.gcMaxMs, 2)
    console.log(`\n/health samples: inline ${fmt(inline.health.samples)}, ours ${fmt(offloaded.health.samples)}, piscina ${fmt(piscina.health.samples)}; errors: inline ${fmt(inline.errors)}, ours ${fmt(offloaded.errors)}, ours niceness 0 ${fmt(nice0.errors)}, piscina ${fmt(piscina.errors)}`)
  }
  console.log(`\ntotal ${((performance.now() - started) / 1000).toFixed(1)} s`)
}

if (require.main === module) {
  if (process.argv[2] === 'server') {
    runServer(process.argv[3])
  } else {
    main().catch((err) => {
      console.error(err)
      process.exitCode = 1
    })
  }
}
