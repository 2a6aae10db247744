'use strict'

/**
 * Worker-to-worker broadcast: clusterize's bus vs the textbook relay, side by side.
 *
 *   naive: worker process.send({ topic, data }) -> the primary loops over
 *          cluster.workers and worker.send()s each message to each other worker.
 *   ours:  bus.broadcast(): the sender encodes once, messages posted in the same
 *          tick go out as one IPC write, the primary relays the encoded payload
 *          untouched, again one write per worker per tick. Wired with the same
 *          hooks clusterize's runtime calls (lib/bus), not a copy.
 *
 * Worker 0 sends, the other workers count. Measures:
 *   - burst throughput: M messages sent 100 per tick; messages/s delivered
 *     (all receivers) from the first send to the last delivery (ours waits
 *     with bus.drained() when refused with ERR_CLUSTERIZE_BUS_BACKPRESSURE);
 *   - latency at a fixed rate (1,000 msg/s for 3 s, one message per ms): p50/p99 of
 *     send -> delivery, on the shared monotonic clock.
 * Prints a Markdown table. Bounded (< 90 s); every process it forks is killed by PID.
 *
 * --rt: the latency phases (only those: light, one message per ms) run under
 * SCHED_FIFO (bench/lib/realtime.js), the primary and every worker of the set
 * measured, so that the other work on a shared box does not decide the p99.
 * The bursts stay under the normal scheduler.
 *
 *   node bench/bus.js [--workers 3] [--messages 40000] [--rounds 3] [--rt]
 */

const cluster = require('cluster')

const { numberArg } = require('./lib/args')
const { pids, killForked: killAll, stopForked, waitCtl, wireBusWorker } = require('./lib/forked')
const { underFifo } = require('./lib/realtime')
const arg = (name, fallback, quick) => numberArg('--' + name, fallback, quick)

const TOPIC = 'bench:tick'
const SIZES = [{ label: '64 B', bytes: 64 }, { label: '1 KiB', bytes: 1024 }]
const CHUNK = 100
const RATE = 1000
const RATE_SECONDS = 3
const RT = process.argv.includes('--rt')
let rtFailed = false

// ---- worker -------------------------------------------------------------------

function runWorker () {
  const mode = process.env.BENCH_MODE
  const id = Number(process.env.BENCH_ID)
  let send
  let onTick = () => {}
  /** ours: wait for room after ERR_CLUSTERIZE_BUS_BACKPRESSURE (a 1 KiB burst can queue past bus.maxQueuedBytes on a busy box) */
  let drained = null
  if (mode === 'ours') {
    const bus = wireBusWorker(id, TOPIC, (data) => onTick(data))
    send = (data) => bus.broadcast(TOPIC, data)
    drained = () => bus.drained()
  } else {
    process.on('message', (message) => { if (message && message.topic === TOPIC) onTick(message.data) })
    send = (data) => process.send({ topic: TOPIC, data })
  }

  process.on('message', (message) => {
    if (!message || message.type !== 'ctl') return
    if (message.cmd === 'burst') {
      if (id === 0) burst(message)
      else expect(message.count, 'burst', false)
    } else if (message.cmd === 'exit') {
      process.exit(0)
    } else if (message.cmd === 'rate') {
      if (id === 0) paced(message)
      else expect(message.count, 'rate', true)
    }
  })
  process.send({ type: 'ctl', cmd: 'up', id })

  function payload (bytes, seq) {
    return { seq, t: Number(process.hrtime.bigint()), pad: 'x'.repeat(Math.max(0, bytes - 40)) }
  }

  function burst ({ count, bytes }) {
    const start = process.hrtime.bigint()
    let seq = 0
    ;(function chunk () {
      const end = Math.min(count, seq + CHUNK)
      while (seq < end) {
        try {
          send(payload(bytes, seq))
        } catch (err) {
          if (drained === null || err.code !== 'ERR_CLUSTERIZE_BUS_BACKPRESSURE') throw err
          drained().then(chunk)
          return
        }
        seq++
      }
      if (seq < count) setImmediate(chunk)
      else process.send({ type: 'ctl', cmd: 'sent', start: String(start) })
    })()
  }

  function paced ({ count, bytes }) {
    const start = Date.now()
    let seq = 0
    const timer = setInterval(() => {
      const due = Math.min(count, Math.floor((Date.now() - start) * RATE / 1000))
      while (seq < due) send(payload(bytes, seq++))
      if (seq >= count) {
        clearInterval(timer)
        process.send({ type: 'ctl', cmd: 'sent' })
      }
    }, 1)
  }

  function expect (count, what, keepLatency) {
    let got = 0
    const latencies = keepLatency ? new Float64Array(count) : null
    onTick = (data) => {
      const now = process.hrtime.bigint()
      if (latencies) latencies[got] = (Number(now) - data.t) / 1e6
      if (++got === count) {
        onTick = () => {}
        const report = { type: 'ctl', cmd: 'done', what, last: String(now) }
        if (latencies) {
          latencies.sort()
          report.p50 = latencies[Math.floor(count * 0.5)]
          report.p99 = latencies[Math.floor(count * 0.99)]
        }
        process.send(report)
      }
    }
  }
}

// ---- primary ------------------------------------------------------------------

for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => { killAll(); process.exit(130) })

async function runPrimary () {
  const workers = arg('workers', 3)
  const messages = arg('messages', 40000, 10000)
  const rounds = arg('rounds', 3, 1)
  const deadline = setTimeout(() => { console.error('bench/bus.js: over 85 s, giving up'); killAll(); process.exit(1) }, 85000)
  const only = process.env.BENCH_ONLY // 'naive' or 'ours', for profiling one side
  const modes = ['naive', 'ours'].filter((mode) => !only || mode === only)
  const results = []
  for (const size of SIZES) {
    // Both sides stay up for the whole size and take turns, so machine noise
    // hits them alike; throughput is the median of `rounds` bursts.
    const sets = {}
    for (const mode of modes) sets[mode] = await startSet(mode, workers)
    const bursts = Object.fromEntries(modes.map((mode) => [mode, []]))
    for (let round = 0; round < rounds; round++) {
      for (const mode of modes) bursts[mode].push(await burst(sets[mode], messages, size.bytes))
    }
    for (const mode of modes) {
      const latency = await paced(sets[mode], size.bytes)
      results.push(Object.assign({ mode, size: size.label, throughput: median(bursts[mode]) }, latency))
    }
    for (const mode of modes) await stopSet(sets[mode])
  }
  clearTimeout(deadline)
  printTable(results, workers, messages, rounds)
}

function median (values) {
  const sorted = values.slice().sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

async function startSet (mode, workerCount) {
  cluster.setupPrimary({ exec: __filename, args: [], silent: false })
  const forked = []
  const ups = []
  for (let id = 0; id < workerCount; id++) {
    const worker = cluster.fork({ BENCH_MODE: mode, BENCH_ID: String(id) })
    pids.add(worker.process.pid)
    forked.push(worker)
    ups.push(waitCtl(worker, (m) => m.cmd === 'up'))
  }
  let teardown
  if (mode === 'ours') {
    const ipc = require('../lib/ipc')
    const { WorkerRecord } = require('../lib/primary/worker-record')
    const busHooks = require('../lib/bus')
    if (busHooks.bus.role !== 'primary') busHooks.busRuntime.configure({ serialization: 'json' }, { role: 'primary' })
    const records = forked.map((worker, id) => {
      // The bus's primary side takes the supervisor's WorkerRecord (its channel, isReady(), isLive()).
      const record = new WorkerRecord(id, worker, 1, 0)
      record.markReady(null)
      busHooks.busRuntime.addWorker(record)
      ipc.listen(worker, (message) => { if (message.kind === 'bus') busHooks.busRuntime.onWorkerMessage(record, message) })
      return record
    })
    teardown = () => records.forEach((record) => busHooks.busRuntime.removeWorker(record))
  } else {
    // The textbook relay: every message, to every other worker, one send() each.
    for (const from of forked) {
      from.on('message', (message) => {
        if (!message || message.topic === undefined) return
        for (const worker of forked) {
          if (worker !== from) worker.send(message)
        }
      })
    }
    teardown = () => {}
  }
  await Promise.all(ups)
  return { mode, forked, teardown }
}

async function burst (set, messages, bytes) {
  const receivers = set.forked.slice(1)
  const done = receivers.map((w) => waitCtl(w, (m) => m.cmd === 'done' && m.what === 'burst'))
  const sent = waitCtl(set.forked[0], (m) => m.cmd === 'sent')
  for (const w of set.forked) w.send({ type: 'ctl', cmd: 'burst', count: messages, bytes })
  const [{ start }, ...dones] = await Promise.all([sent, ...done])
  const last = dones.reduce((max, d) => (BigInt(d.last) > max ? BigInt(d.last) : max), 0n)
  return (messages * receivers.length) / (Number(last - BigInt(start)) / 1e9)
}

async function paced (set, bytes) {
  const count = RATE * RATE_SECONDS
  const run = async () => {
    const done = set.forked.slice(1).map((w) => waitCtl(w, (m) => m.cmd === 'done' && m.what === 'rate'))
    for (const w of set.forked) w.send({ type: 'ctl', cmd: 'rate', count, bytes })
    return Promise.all(done)
  }
  let reports
  if (RT) {
    const result = await underFifo([process.pid, ...set.forked.map((w) => w.process.pid)], run)
    if (!result.fifo) rtFailed = true
    reports = result.value
  } else {
    reports = await run()
  }
  return { p50: Math.max(...reports.map((r) => r.p50)), p99: Math.max(...reports.map((r) => r.p99)) }
}

async function stopSet (set) {
  set.teardown()
  await stopForked(set.forked)
}

function printTable (results, workers, messages, rounds) {
  const fmt = (n) => Math.round(n).toLocaleString('en-US')
  const ms = (n) => n.toFixed(3)
  console.log(`\n### Bus: worker-to-worker broadcast (${workers} workers: 1 sender, ${workers - 1} receivers; Node ${process.version})\n`)
  console.log(`Burst: ${messages.toLocaleString('en-US')} messages sent ${CHUNK} per tick, deliveries/s over all receivers (median of ${rounds} alternating rounds). Latency: ${RATE} msg/s for ${RATE_SECONDS} s, send -> delivery${RT ? (rtFailed ? ' (--rt asked, but chrt failed: normal scheduler)' : ', under SCHED_FIFO (--rt)') : ''}.\n`)
  console.log('| message | relay | delivered msg/s (burst) | p50 latency ms @1k/s | p99 latency ms @1k/s |')
  console.log('| --- | --- | ---: | ---: | ---: |')
  for (const size of SIZES) {
    const naive = results.find((r) => r.size === size.label && r.mode === 'naive')
    const ours = results.find((r) => r.size === size.label && r.mode === 'ours')
    if (!naive || !ours) {
      for (const r of [naive, ours].filter(Boolean)) console.log(`| ${size.label} | ${r.mode} | ${fmt(r.throughput)} | ${ms(r.p50)} | ${ms(r.p99)} |`)
      continue
    }
    console.log(`| ${size.label} | naive per-message relay | ${fmt(naive.throughput)} | ${ms(naive.p50)} | ${ms(naive.p99)} |`)
    console.log(`| ${size.label} | clusterize bus | ${fmt(ours.throughput)} | ${ms(ours.p50)} | ${ms(ours.p99)} |`)
    console.log(`| ${size.label} | **ratio (bus / naive)** | **${(ours.throughput / naive.throughput).toFixed(2)}x** | ${(ours.p50 / naive.p50).toFixed(2)}x | ${(ours.p99 / naive.p99).toFixed(2)}x |`)
  }
}

if (cluster.isWorker) runWorker()
else runPrimary().catch((err) => { console.error(err); killAll(); process.exit(1) })
