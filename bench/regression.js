'use strict'

/**
 * bench/regression.js: this checkout against a base commit, one bench's core
 * measurement, both trees side by side in rotated rounds in one run (#24's
 * "no regression, measured"). The base is a throwaway `git worktree add
 * --detach` in a temp dir, with this checkout's node_modules symlinked into
 * it; it is removed at the end, also on Ctrl-C or a crash.
 *
 *   node bench/regression.js <throughput|bus|sessions|socketio> [--base 5eb2137] [--rounds 5] [--quick]
 *
 *   throughput  GET / on the hello app, clusterize 'rr' with 2 workers (bench/lib/contenders.js,
 *               servers.js with BENCH_CLUSTERIZE_MODULE): req/s and p99 at full load, then the
 *               primary's and the workers' CPU per request at a fixed rate.
 *   sessions    the cluster store, a read + write per request (bench/sessions.js's server, login,
 *               load and CPU functions): req/s, p99, CPU per request at a fixed rate.
 *   socketio    one io.emit() burst to bare WebSocket clients over 2 workers (bench/socketio.js's
 *               round()), with and without connectionStateRecovery, and the same messages paced
 *               (one io.emit() every 5 ms, no recovery): delivered msg/s, p50, p99,
 *               the primary's CPU per delivered message.
 *   bus         each tree's own bench/bus.js (BENCH_ONLY=ours, 3 workers, --messages, one burst per
 *               run), its table read back: burst msg/s, p50 and p99 at 1,000 msg/s. No CPU figure.
 *
 * Ratios are this checkout / the base: above 1 is more req/s (better) or more
 * latency and CPU (worse). It measures; it never asserts.
 */

const fs = require('fs')
const os = require('os')
const path = require('path')
const { execFileSync } = require('child_process')
const { numberArg: arg, isQuick } = require('./lib/args')
const { startLocal } = require('./lib/contenders')
const { runAutocannon } = require('./lib/load')
const { median, sameRoundMedian, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, startProcess, threadsCpuMs, sleep } = require('./lib/proc')
const { boxLabel, otherWorkLabel } = require('./lib/results')
const { cpuSample, otherWorkLine } = require('./lib/other-load')
const { kill: killPids } = require('./lib/served')

const ROOT = path.join(__dirname, '..')
const BENCHES = ['throughput', 'bus', 'sessions', 'socketio']
/** socketio's paced rows: the burst's messages, one io.emit() every this many ms (no burst queued in front). */
const PACED_EVERY_MS = 5

function option (name, fallback) {
  const i = process.argv.indexOf(name)
  return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback
}

// ---------------------------------------------------------------- the base tree

/**
 * A detached worktree of `commit` in a temp dir, this checkout's node_modules linked in.
 * @returns {{ dir: string, sha: string, remove: () => void }}
 */
function addBaseTree (commit) {
  const sha = execFileSync('git', ['rev-parse', '--short', commit], { cwd: ROOT, encoding: 'utf8' }).trim()
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-regression-'))
  const dir = path.join(tmp, 'base')
  let removed = false
  function remove () {
    if (removed) return
    removed = true
    try {
      execFileSync('git', ['worktree', 'remove', '--force', dir], { cwd: ROOT, stdio: 'ignore' })
    } catch {
      execFileSync('git', ['worktree', 'prune'], { cwd: ROOT, stdio: 'ignore' })
    }
    fs.rmSync(tmp, { recursive: true, force: true })
  }
  // Synchronous, so that it also runs from process.exit() (installCleanup's Ctrl-C handler).
  process.once('exit', remove)
  execFileSync('git', ['worktree', 'add', '--detach', dir, commit], { cwd: ROOT, stdio: 'ignore' })
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'), 'dir')
  return { dir, sha, remove }
}

// ---------------------------------------------------------------- the benches

/** Each bench: start(tree) -> ctx, round(ctx) -> { metric: value }, stop(ctx); `metrics` in print order. */
const BENCH = {
  throughput: {
    what: 'GET / on the hello app, clusterize \'rr\', 2 workers, 50 connections',
    metrics: [['req/s', 'rps'], ['p99 ms', 'p99'], ['p99 ms @fixed rate', 'fixedP99'], ['primary µs/req @fixed rate', 'primaryUs'], ['workers µs/req @fixed rate', 'workersUs']],
    async start (tree) {
      return { server: await startLocal('clusterize', { label: tree.name, env: { BENCH_CLUSTERIZE_MODULE: tree.dir }, options: { workers: 2 } }) }
    },
    async round (ctx, settings) {
      const load = await runAutocannon({ port: ctx.server.port, connections: 50, durationSec: settings.seconds })
      const cpu = await fixedRateCpu(await ctx.server.allPids(), settings.seconds, () => runAutocannon({ port: ctx.server.port, connections: 20, durationSec: settings.seconds, overallRate: settings.rate }))
      return { rps: load.rps, p99: load.p99, primaryUs: cpu.primaryUs, workersUs: cpu.workersUs, fixedP99: cpu.p99 }
    },
    stop (ctx) { return ctx.server.stop() }
  },

  sessions: {
    what: 'the cluster store, a read + write per request (GET /count), 2 workers, 20 connections each with its own session',
    metrics: [['req/s', 'rps'], ['p99 ms', 'p99'], ['primary µs/req @fixed rate', 'primaryUs'], ['workers µs/req @fixed rate', 'workersUs']],
    async start (tree) {
      const sessions = require('./sessions')
      const server = await sessions.startServer(tree.name, { store: 'cluster', workers: 2, module: tree.dir })
      const cookies = await sessions.prepare(server.port)
      await sessions.measure(server.port, cookies, 1, 20) // warm-up
      return { sessions, server, cookies }
    },
    async round (ctx, settings) {
      const { sessions, server, cookies } = ctx
      const load = await sessions.measure(server.port, cookies, settings.seconds, 20)
      const cpu = await sessions.measureCpu(server, cookies, settings.rate, settings.seconds, null)
      return { rps: load.rps, p99: load.p99, primaryUs: cpu.primary, workersUs: cpu.workers }
    },
    stop (ctx) { return ctx.sessions.stopServer(ctx.server) }
  },

  socketio: {
    what: 'one io.emit() burst to 200 bare WebSocket clients over 2 workers, and the same 200 messages paced, one io.emit() every ' + PACED_EVERY_MS + ' ms (a fresh server per round and kind)',
    metrics: [['delivered msg/s', 'delivered'], ['p50 ms', 'p50'], ['p99 ms', 'p99'], ['primary µs per io.emit()', 'primaryUs'],
      ['recovery: delivered msg/s', 'rDelivered'], ['recovery: p50 ms', 'rP50'], ['recovery: p99 ms', 'rP99'], ['recovery: primary µs per io.emit()', 'rPrimaryUs'],
      [`paced (1 io.emit() / ${PACED_EVERY_MS} ms): p50 ms`, 'pP50'], ['paced: p99 ms', 'pP99']],
    start (tree) { return { tree, socketio: require('./socketio') } },
    async round (ctx) {
      const env = { BENCH_CLUSTERIZE_MODULE: ctx.tree.dir }
      const clients = 200
      const perMessage = (r) => (r.primaryCpu * 1000) / ctx.socketio.MESSAGES
      const plain = await ctx.socketio.round('clusterize', clients, 'bare', env)
      const recovery = await ctx.socketio.round('clusterize-recovery', clients, 'bare', env)
      const paced = await ctx.socketio.round('clusterize', clients, 'bare', env, { pacedEveryMs: PACED_EVERY_MS })
      return {
        delivered: plain.delivered, p50: plain.p50, p99: plain.p99, primaryUs: perMessage(plain),
        rDelivered: recovery.delivered, rP50: recovery.p50, rP99: recovery.p99, rPrimaryUs: perMessage(recovery),
        pP50: paced.p50, pP99: paced.p99
      }
    },
    stop () {}
  },

  bus: {
    what: 'each tree\'s own bench/bus.js, its bus rows only (3 workers: 1 sender, 2 receivers, one burst and 3 s at 1,000 msg/s per run)',
    metrics: [['64 B burst msg/s', 'small'], ['64 B p50 ms @1k/s', 'smallP50'], ['64 B p99 ms @1k/s', 'smallP99'],
      ['1 KiB burst msg/s', 'large'], ['1 KiB p50 ms @1k/s', 'largeP50'], ['1 KiB p99 ms @1k/s', 'largeP99']],
    start (tree) { return { tree } },
    async round (ctx, settings) {
      // The same workload from both trees' scripts (an older one may not know --quick).
      const args = [path.join(ctx.tree.dir, 'bench', 'bus.js'), '--workers', '3', '--messages', String(settings.messages), '--rounds', '1']
      const proc = startProcess({ args, env: { BENCH_ONLY: 'ours' }, name: `bus.js (${ctx.tree.name})` })
      const { code } = await proc.exited
      const rows = {}
      for (const line of proc.lines) {
        const m = /^\| (64 B|1 KiB) \| ours \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \|/.exec(line)
        if (m) rows[m[1]] = { rate: Number(m[2].replace(/,/g, '')), p50: Number(m[3]), p99: Number(m[4]) }
      }
      if (code !== 0 || !rows['64 B'] || !rows['1 KiB']) throw new Error(`bench/bus.js of ${ctx.tree.name} exited ${code} without its table: ${proc.stderr}`)
      return {
        small: rows['64 B'].rate, smallP50: rows['64 B'].p50, smallP99: rows['64 B'].p99,
        large: rows['1 KiB'].rate, largeP50: rows['1 KiB'].p50, largeP99: rows['1 KiB'].p99
      }
    },
    stop () {}
  }
}

/**
 * CPU per request of the primary (pids[0]) and the workers while `load()` runs at a fixed rate:
 * far less sensitive to other work on the box than peak req/s.
 */
async function fixedRateCpu (pids, seconds, load) {
  // Every thread's schedstat (ns), not /proc's clock ticks: 10 ms steps are too coarse for the primary.
  const before = pids.map(threadsCpuMs)
  const result = await load()
  const spent = pids.map((pid, i) => threadsCpuMs(pid) - before[i])
  const requests = result.rps * seconds || 1
  const workersMs = spent.slice(1).reduce((a, b) => a + b, 0)
  return { primaryUs: (spent[0] * 1000) / requests, workersUs: (workersMs * 1000) / requests, p99: result.p99 }
}

// ---------------------------------------------------------------- the run

function loadAverage () {
  return os.loadavg().map((v) => v.toFixed(2)).join(' ')
}

function print (bench, trees, samples, run) {
  const [head, base] = trees
  // What other work used decides; the load average counts this run's own servers and load.
  const cores = os.availableParallelism()
  const other = otherWorkLine(run.cpuBefore, cpuSample(), cores, otherWorkLabel)
  const box = other || `**${boxLabel(Math.max(os.loadavg()[0], run.loadBefore[0]), cores)}**`
  console.log(`\n### Regression: ${run.name}, this checkout (${head.sha}) against ${base.sha}\n`)
  console.log(machineLine())
  console.log(`\n${bench.what}; ${run.rounds} rounds${run.quick ? ' (--quick)' : ''}, the order of the trees swapped each round; medians, and the median of same-round ratios. ` +
    `Load average ${run.loadBefore.map((v) => v.toFixed(2)).join(' ')} before, ${loadAverage()} after; ${box}.\n`)
  const rows = bench.metrics.map(([label, key]) => {
    const h = samples.get(head.name).map((s) => s[key])
    const b = samples.get(base.name).map((s) => s[key])
    const sameRound = sameRoundMedian(h, b, (v) => v)
    const size = Math.abs(median(h))
    const digits = size >= 100 ? 0 : size >= 10 ? 1 : 2
    return [label, fmt(median(h), digits), fmt(median(b), digits), `${(median(h) / median(b)).toFixed(2)}x`, `${sameRound.toFixed(2)}x`,
      h.map((v) => fmt(v, digits)).join(' / '), b.map((v) => fmt(v, digits)).join(' / ')]
  })
  console.log(markdownTable(['measure', `this checkout (${head.sha})`, `base (${base.sha})`, 'ratio of medians', 'median same-round ratio', 'rounds, this checkout', 'rounds, base'], rows))
}

async function main () {
  const name = process.argv[2]
  if (!BENCHES.includes(name)) {
    console.error(`usage: node bench/regression.js <${BENCHES.join('|')}> [--base 5eb2137] [--rounds 5] [--seconds 3] [--rate 1000] [--quick]`)
    process.exitCode = 2
    return
  }
  installCleanup()
  const contexts = new Map()
  // Servers forked by a script's --serve side (sessions) are not in bench/lib/proc's list: killed here on Ctrl-C.
  process.once('exit', function killServed () {
    for (const ctx of contexts.values()) if (ctx.server && Array.isArray(ctx.server.pids)) killPids(ctx.server.pids)
  })
  const bench = BENCH[name]
  const settings = { seconds: arg('--seconds', 3, 2), rate: arg('--rate', 1000), messages: arg('--messages', 20000, 10000) }
  const rounds = arg('--rounds', 5, 3)
  const baseTree = addBaseTree(option('--base', '5eb2137'))
  const headSha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim()
  const dirty = execFileSync('git', ['status', '--porcelain', '--', 'lib'], { cwd: ROOT, encoding: 'utf8' }).trim() !== ''
  const trees = [
    { name: 'this checkout', dir: ROOT, sha: headSha + (dirty ? '+changes' : '') },
    { name: 'base', dir: baseTree.dir, sha: baseTree.sha }
  ]
  const loadBefore = os.loadavg()
  const cpuBefore = cpuSample()
  const samples = new Map(trees.map((tree) => [tree.name, []]))
  try {
    for (const tree of trees) contexts.set(tree.name, await bench.start(tree))
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? trees : trees.slice().reverse()
      for (const tree of order) {
        const sample = await bench.round(contexts.get(tree.name), settings)
        samples.get(tree.name).push(sample)
        process.stderr.write(`round ${round + 1} ${tree.name}: ${JSON.stringify(sample, (k, v) => typeof v === 'number' ? Number(v.toFixed(2)) : v)}\n`)
        await sleep(300)
      }
    }
  } finally {
    for (const ctx of contexts.values()) await bench.stop(ctx)
    baseTree.remove()
  }
  print(bench, trees, samples, { name, rounds, loadBefore, cpuBefore, quick: isQuick() })
}

main().catch((err) => {
  process.stderr.write(err.stack + '\n')
  process.exitCode = 1
})
