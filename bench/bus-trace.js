'use strict'

/**
 * Where a bus message's time goes, hop by hop (bench/bus.js measures only the
 * end to end). Same setup as bench/bus.js's latency row: 3 workers, worker 0
 * sends one 64 B message per ms for 3 s, the others receive; clusterize's bus
 * ("ours") and the textbook relay ("naive") take turns, both sets up at once.
 * Every hop is stamped with process.hrtime (CLOCK_MONOTONIC, shared by all
 * processes on the machine):
 *
 *   t0 send()        the sender builds the message (as bench/bus.js does)
 *   t1 sender write  the sender hands the IPC write to the OS (ours: Channel.write)
 *   t2 primary in    the primary's 'message' event for it
 *   t3 primary write the primary hands the write towards the receiver to the OS
 *   t4 receiver in   the receiver's 'message' event
 *   t5 delivered     the bus listener (naive: = t4)
 *
 * Prints p50/p99/max of each hop and of the end to end, and the slowest 1%:
 * which hop its time went to, and CPU time and GC pauses per process.
 * `--burst N` sends a burst of N messages first (as bench/bus.js does before
 * its latency row); `--rt` runs the measured phase under SCHED_FIFO (see
 * bench/lib/realtime.js) to tell the code's latency from the machine's load.
 * Timestamps on the sender's writes and the primary's cost a JSON.parse of the
 * payload in "ours" only: they slightly favour the naive relay.
 *
 *   node bench/bus-trace.js [--rounds 3] [--burst 40000] [--bytes 64] [--rt]
 */

const cluster = require('cluster')
const { numberArg } = require('./lib/args')
const { pids, killForked: killAll, stopForked, waitCtl, wireBusWorker } = require('./lib/forked')
const { underFifo } = require('./lib/realtime')

const TOPIC = 'bench:tick'
const RATE = 1000
const SECONDS = 3
const COUNT = RATE * SECONDS
const STAGES = ['t0 send', 't1 sender write', 't2 primary in', 't3 primary write', 't4 receiver in', 't5 delivered']

const now = () => Number(process.hrtime.bigint())

/** GC pauses while `gc.on`: count, total and longest (ms), by kind (minor/major). */
const gc = { on: false, minor: [0, 0, 0], major: [0, 0, 0], reset () { this.minor = [0, 0, 0]; this.major = [0, 0, 0] } }
{
  const { PerformanceObserver, constants } = require('perf_hooks')
  new PerformanceObserver((list) => {
    if (!gc.on) return
    for (const entry of list.getEntries()) {
      const bucket = entry.detail && entry.detail.kind === constants.NODE_PERFORMANCE_GC_MINOR ? gc.minor : gc.major
      bucket[0]++
      bucket[1] += entry.duration
      bucket[2] = Math.max(bucket[2], entry.duration)
    }
  }).observe({ entryTypes: ['gc'] })
}
const gcReport = () => `${gc.minor[0]}m/${gc.major[0]}M max ${Math.max(gc.minor[2], gc.major[2]).toFixed(1)}`

/** seqs carried by an envelope or a naive message, for stamping. */
function seqsOf (message, out) {
  if (!message || typeof message !== 'object') return out
  if (message.topic === TOPIC) out.push(message.data.seq)
  else if (message.kind === 'batch') for (const item of message.items) seqsOf(item, out)
  else if (message.op === 'B') for (let i = 1; i < message.m.length; i += 2) out.push(JSON.parse(message.m[i]).seq)
  else if (message.op === 'M') for (let i = 1; i < message.m.length; i += 4) out.push(JSON.parse(message.m[i]).seq)
  else if (message.op === 'm' || message.op === 'b') out.push(JSON.parse(message.d).seq)
  return out
}

/** Stamp Channel writes: `stampsFor(peer)` gives the array to stamp (or null), `queued(peer)` counts writes libuv could not finish at once. */
function stampWrites (Channel, stampsFor, queued) {
  const write = Channel.prototype.write
  Channel.prototype.write = function stampedWrite (message) {
    const t = now()
    const result = write.apply(this, arguments)
    const stamps = stampsFor(this.peer)
    if (stamps === null) return result
    const channel = this.peer === process ? process.channel : this.peer.process.channel
    if (queued && channel && channel.writeQueueSize > 0) queued(this.peer)
    for (const seq of seqsOf(message, [])) if (seq < COUNT && stamps[seq] === 0) stamps[seq] = t
    return result
  }
}

// ---- worker -------------------------------------------------------------------

function runWorker () {
  const mode = process.env.BENCH_MODE
  const id = Number(process.env.BENCH_ID)
  const bytes = Number(process.env.BENCH_BYTES)
  const stamps = { t0: new Float64Array(COUNT), t1: new Float64Array(COUNT), t4: new Float64Array(COUNT), t5: new Float64Array(COUNT) }
  let send
  let onTick = () => {}
  let active = false
  process.prependListener('message', (message) => {
    if (!active) return
    const t = now()
    for (const seq of seqsOf(message, [])) if (seq < COUNT) stamps.t4[seq] = t
  })
  if (mode === 'ours') {
    // Patched before the channel exists: every write of the sender's channel is stamped.
    stampWrites(require('../lib/ipc').Channel, () => active ? stamps.t1 : null)
    const bus = wireBusWorker(id, TOPIC, (data) => onTick(data))
    send = (data) => bus.broadcast(TOPIC, data)
  } else {
    process.on('message', (message) => { if (message && message.topic === TOPIC) onTick(message.data) })
    send = (data) => {
      const message = { topic: TOPIC, data }
      if (active) stamps.t1[data.seq] = now()
      process.send(message)
    }
  }
  const payload = (seq) => ({ seq, t: now(), pad: 'x'.repeat(Math.max(0, bytes - 40)) })

  process.on('message', (message) => {
    if (!message || message.type !== 'ctl') return
    if (message.cmd === 'exit') process.exit(0)
    if (message.cmd === 'burst') {
      if (id !== 0) return expect(message.count, () => process.send({ type: 'ctl', cmd: 'done' }))
      let seq = COUNT
      const end = COUNT + message.count
      ;(function chunk () {
        const stop = Math.min(end, seq + 100)
        while (seq < stop) send(payload(seq++))
        if (seq < end) setImmediate(chunk)
      })()
    }
    if (message.cmd === 'rate') {
      for (const key of Object.keys(stamps)) stamps[key].fill(0)
      gc.reset()
      gc.on = true
      const cpuStart = process.cpuUsage()
      const cpu = () => { const u = process.cpuUsage(cpuStart); return (u.user + u.system) / COUNT }
      active = true
      if (id !== 0) {
        return expect(COUNT, (data) => {
          active = false
          process.send({ type: 'ctl', cmd: 'done', gc: gcReport(), cpu: cpu(), stamps: { t0: Array.from(stamps.t0), t4: Array.from(stamps.t4), t5: Array.from(stamps.t5) } })
        })
      }
      const start = Date.now()
      let seq = 0
      const timer = setInterval(() => {
        const due = Math.min(COUNT, Math.floor((Date.now() - start) * RATE / 1000))
        while (seq < due) send(payload(seq++))
        if (seq >= COUNT) {
          clearInterval(timer)
          setTimeout(() => process.send({ type: 'ctl', cmd: 'sent', gc: gcReport(), cpu: cpu(), stamps: { t1: Array.from(stamps.t1) } }), 200)
        }
      }, 1)
    }
  })
  process.send({ type: 'ctl', cmd: 'up', id })

  function expect (count, done) {
    let got = 0
    onTick = (data) => {
      if (data.seq < COUNT) {
        stamps.t0[data.seq] = data.t
        stamps.t5[data.seq] = now()
      }
      if (++got === count) {
        onTick = () => {}
        done()
      }
    }
  }
}

// ---- primary ------------------------------------------------------------------


async function runPrimary () {
  const rounds = numberArg('--rounds', 3)
  const burstCount = numberArg('--burst', 0)
  const bytes = numberArg('--bytes', 64)
  const deadline = setTimeout(() => { console.error('bench/bus-trace.js: over 120 s, giving up'); killAll(); process.exit(1) }, 120000)
  const ipc = require('../lib/ipc')
  const primaryStamps = {}
  let activeSet = null
  stampWrites(ipc.Channel, (peer) => activeSet && peer.bench ? activeSet.t3[peer.bench.id] : null,
    (peer) => { activeSet.queued++ })
  const sets = {}
  for (const mode of ['naive', 'ours']) {
    sets[mode] = await startSet(mode, bytes, (stamps) => { activeSet = stamps })
    primaryStamps[mode] = sets[mode].stamps
  }
  const rows = { naive: [], ours: [] }
  for (let round = 0; round < rounds; round++) {
    for (const mode of ['naive', 'ours']) {
      const set = sets[mode]
      if (burstCount > 0) {
        const done = set.forked.slice(1).map((w) => waitCtl(w, (m) => m.cmd === 'done'))
        for (const w of set.forked) w.send({ type: 'ctl', cmd: 'burst', count: burstCount })
        await Promise.all(done)
      }
      set.stamps.t2.fill(0)
      set.stamps.t3[1].fill(0)
      set.stamps.t3[2].fill(0)
      set.stamps.queued = 0
      activeSet = set.stamps
      const cpuStart = process.cpuUsage()
      gc.reset()
      gc.on = true
      const sent = waitCtl(set.forked[0], (m) => m.cmd === 'sent')
      const done = set.forked.slice(1).map((w) => waitCtl(w, (m) => m.cmd === 'done'))
      const run = () => {
        for (const w of set.forked) w.send({ type: 'ctl', cmd: 'rate' })
        return Promise.all([sent, ...done])
      }
      const pids = [process.pid, ...set.forked.map((w) => w.process.pid)]
      const [sender, ...receivers] = process.argv.includes('--rt') ? (await underFifo(pids, run)).value : await run()
      activeSet = null
      const primaryCpu = process.cpuUsage(cpuStart)
      const row = analyse(sender.stamps, set.stamps, receivers.map((r) => r.stamps), mode)
      row.gc = [sender.gc, gcReport(), ...receivers.map((r) => r.gc)]
      gc.on = false
      row.cpu = [sender.cpu, (primaryCpu.user + primaryCpu.system) / COUNT, ...receivers.map((r) => r.cpu)]
      rows[mode].push(row)
    }
  }
  for (const mode of ['naive', 'ours']) await stopSet(sets[mode])
  clearTimeout(deadline)
  print(rows, rounds, burstCount, bytes)
}

async function startSet (mode, bytes, setActive) {
  cluster.setupPrimary({ exec: __filename, args: [], silent: false })
  const stamps = { t2: new Float64Array(COUNT), t3: [null, new Float64Array(COUNT), new Float64Array(COUNT)], queued: 0 }
  const forked = []
  const ups = []
  for (let id = 0; id < 3; id++) {
    const worker = cluster.fork({ BENCH_MODE: mode, BENCH_ID: String(id), BENCH_BYTES: String(bytes) })
    pids.add(worker.process.pid)
    worker.bench = { id }
    forked.push(worker)
    ups.push(waitCtl(worker, (m) => m.cmd === 'up'))
  }
  forked[0].on('message', (message) => {
    const t = now()
    for (const seq of seqsOf(message, [])) if (seq < COUNT && stamps.t2[seq] === 0) stamps.t2[seq] = t
  })
  if (mode === 'ours') {
    const ipc = require('../lib/ipc')
    const { WorkerRecord } = require('../lib/primary/worker-record')
    const busHooks = require('../lib/bus')
    if (busHooks.bus.role !== 'primary') busHooks.busRuntime.configure({ serialization: 'json' }, { role: 'primary' })
    forked.forEach((worker, id) => {
      // The bus's primary side takes the supervisor's WorkerRecord (its channel, isReady(), isLive()).
      const record = new WorkerRecord(id, worker, 1, 0)
      record.markReady(null)
      busHooks.busRuntime.addWorker(record)
      ipc.listen(worker, (message) => { if (message.kind === 'bus') busHooks.busRuntime.onWorkerMessage(record, message) })
    })
  } else {
    for (const from of forked) {
      from.on('message', (message) => {
        if (!message || message.topic === undefined) return
        for (const worker of forked) {
          if (worker === from) continue
          const seq = message.data.seq
          if (seq < COUNT && stamps.t3[worker.bench.id][seq] === 0) stamps.t3[worker.bench.id][seq] = now()
          worker.send(message)
          if (worker.process.channel.writeQueueSize > 0) stamps.queued++
        }
      })
    }
  }
  await Promise.all(ups)
  return { mode, forked, stamps }
}

function quantile (sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]
}

/** Per hop: p50, p99, max (ms); and for the slowest 1% end to end, the mean of each hop. */
function analyse (sender, primary, receivers, mode) {
  const hops = STAGES.slice(1).map(() => [])
  const total = []
  const slow = []
  receivers.forEach((r, index) => {
    for (let seq = 0; seq < COUNT; seq++) {
      const t = [r.t0[seq], sender.t1[seq], primary.t2[seq], primary.t3[index + 1][seq], r.t4[seq], r.t5[seq]]
      if (t.some((x) => !(x > 0))) continue
      const d = []
      for (let i = 1; i < t.length; i++) d.push((t[i] - t[i - 1]) / 1e6)
      d.forEach((x, i) => hops[i].push(x))
      total.push((t[5] - t[0]) / 1e6)
      slow.push({ total: (t[5] - t[0]) / 1e6, d, seq })
    }
  })
  slow.sort((a, b) => b.total - a.total)
  const worst = slow.slice(0, Math.max(1, Math.floor(slow.length / 100)))
  const worstMeans = hops.map((_, i) => worst.reduce((s, w) => s + w.d[i], 0) / worst.length)
  // When the slowest 1% were sent: tenths of the 3 s run
  const when = new Array(10).fill(0)
  for (const w of worst) when[Math.floor(w.seq * 10 / COUNT)]++
  const stats = (values) => {
    const sorted = values.slice().sort((a, b) => a - b)
    return { p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), max: sorted[sorted.length - 1] }
  }
  return { mode, samples: total.length, total: stats(total), hops: hops.map(stats), worstMeans, when, queued: primary.queued }
}

function print (rows, rounds, burstCount, bytes) {
  const ms = (n) => n.toFixed(3)
  const med = (values) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)]
  console.log(`\n### Bus hops at ${RATE} msg/s, ${bytes} B (${rounds} rounds, median of rounds${burstCount ? `, each after a ${burstCount}-message burst` : ''}${process.argv.includes('--rt') ? ', SCHED_FIFO' : ''}; Node ${process.version})\n`)
  console.log('| relay | hop | p50 ms | p99 ms | max ms | mean in slowest 1% ms |')
  console.log('| --- | --- | ---: | ---: | ---: | ---: |')
  for (const mode of ['naive', 'ours']) {
    const list = rows[mode]
    STAGES.slice(1).forEach((stage, i) => {
      console.log(`| ${mode} | ${STAGES[i]} -> ${stage} | ${ms(med(list.map((r) => r.hops[i].p50)))} | ${ms(med(list.map((r) => r.hops[i].p99)))} | ${ms(med(list.map((r) => r.hops[i].max)))} | ${ms(med(list.map((r) => r.worstMeans[i])))} |`)
    })
    console.log(`| ${mode} | **end to end** | **${ms(med(list.map((r) => r.total.p50)))}** | **${ms(med(list.map((r) => r.total.p99)))}** | ${ms(med(list.map((r) => r.total.max)))} | |`)
  }
  console.log(`\nPrimary writes libuv had to queue (pipe full), per round: naive ${rows.naive.map((r) => r.queued).join(', ')}; ours ${rows.ours.map((r) => r.queued).join(', ')}`)
  for (const mode of ['naive', 'ours']) console.log(`CPU µs per message (sender, primary, receivers), per round, ${mode}: ${rows[mode].map((r) => r.cpu.map((c) => c.toFixed(1)).join('/')).join('; ')}`)
  for (const mode of ['naive', 'ours']) console.log(`GC during the rate phase (minor/Major, longest ms; sender, primary, receivers), ${mode}: ${rows[mode].map((r) => r.gc.join(' | ')).join('; ')}`)
  for (const mode of ['naive', 'ours']) {
    console.log(`Per round, ${mode}, p99 per hop: ${rows[mode].map((r) => r.hops.map((h) => h.p99.toFixed(2)).join('/')).join('; ')}`)
  }
  for (const mode of ['naive', 'ours']) console.log(`Slowest 1% by tenth of the run (300 ms each), ${mode}: ${rows[mode].map((r) => r.when.join(' ')).join('; ')}`)
  console.log(`Samples per round: naive ${rows.naive.map((r) => r.samples).join(', ')}; ours ${rows.ours.map((r) => r.samples).join(', ')}`)
  console.log(`Per round p99 end to end: naive ${rows.naive.map((r) => ms(r.total.p99)).join(', ')}; ours ${rows.ours.map((r) => ms(r.total.p99)).join(', ')}`)
}

async function stopSet (set) {
  await stopForked(set.forked)
}

if (cluster.isWorker) runWorker()
else runPrimary().catch((err) => { console.error(err); killAll(); process.exit(1) })
