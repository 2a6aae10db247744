'use strict'

/**
 * Rate limiting side by side, one run: req/s and p99 with express-rate-limit
 * on every request (limit high enough that every request passes, so the
 * store's cost is what differs), for
 *   - express-rate-limit's MemoryStore, one process (the anchor)
 *   - our ClusterStore, 2 workers (counts in the primary)
 *   - our ClusterStore, 2 workers, bus.redis (counts in Redis)
 *   - rate-limit-redis in 2 workers (each worker its own ioredis connection)
 *   - MemoryStore in 2 workers: per-worker counts (wrong limits), the scaling reference only
 *   - with --ab <dir> (or BENCH_CLUSTERIZE_MODULE=<dir>): the bus.redis row again,
 *     from another checkout (its lib/ and rate-limit entry)
 * Two tables: req/s and p99 at saturation (autocannon, rotated rounds, medians),
 * then p50/p99 at a paced rate every row holds (bench/lib/load.js runPaced).
 * Keys: 100 clients (the connection's port modulo 100). Needs Redis at REDIS_URL
 * (or redis://127.0.0.1:6379) for the Redis rows, skipped with a note otherwise.
 * Loopback only, bounded (about a minute and a half; --quick about 20 s), every
 * process stopped by PID. The machine is shared: the load average at the start
 * and end is printed with the tables.
 *
 *   node bench/rate-limit.js [--duration 3] [--rounds 3] [--connections 50]
 *     [--latency-rate 2000] [--latency-seconds 3] [--latency-passes 2] [--ab <dir>] [--quick]
 *   (--quick: 1 round x 1 s, one paced pass of 0.5 s)
 */

const os = require('os')
const path = require('path')
const http = require('http')
const { startServed, stopServed } = require('./lib/served')
const { redisReachable } = require('./lib/redis')
const { numberArg: arg, isQuick, abDirArg } = require('./lib/args')
const { runAutocannon, pacedLatency } = require('./lib/load')
const { rotated } = require('./lib/rounds')
const { markdownTable, fmt, ratio, median } = require('./lib/table')
const { machineLine } = require('./lib/machine')

const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379'

if (process.argv[2] === '--serve') {
  serve(JSON.parse(process.argv[3]))
} else {
  main().catch((err) => {
    process.stderr.write(err.stack + '\n')
    process.exitCode = 1
  })
}

// ---------------------------------------------------------------- server side

function createApp (spec) {
  const express = require('express')
  const { rateLimit } = require('express-rate-limit')
  const app = express()
  const options = {
    windowMs: 60000,
    limit: 1e9,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    keyGenerator: (req) => 'client-' + (req.socket.remotePort % 100)
  }
  if (spec.store === 'cluster') {
    // --ab: the store and the runtime from another checkout.
    const { ClusterStore } = require(spec.module ? path.join(spec.module, 'rate-limit') : '../rate-limit')
    options.store = new ClusterStore({ prefix: spec.prefix })
  } else if (spec.store === 'rate-limit-redis') {
    const { RedisStore } = require('rate-limit-redis')
    const Redis = require('ioredis')
    const client = new Redis(REDIS_URL)
    options.store = new RedisStore({ prefix: spec.prefix, sendCommand: (command, ...args) => client.call(command, ...args) })
  }
  app.use(rateLimit(options))
  app.get('/', (req, res) => res.send('ok'))
  return app
}

function serve (spec) {
  if (spec.workers === undefined) {
    const server = http.createServer(createApp(spec))
    server.keepAliveTimeout = 65000
    server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port, pids: [process.pid] }))
    return
  }
  const { clusterize } = require(spec.module || '..')
  const handle = clusterize(() => createApp(spec), { port: 0, host: '127.0.0.1', workers: spec.workers, bus: spec.bus, logger: false, banner: false })
  if (!handle.ready || typeof handle.on !== 'function') return // a worker
  handle.ready.then((info) => {
    process.send({ port: info.port, pids: [process.pid].concat(info.workers.map((w) => w.pid)) })
  }, (err) => process.send({ error: err.message }))
  process.on('SIGTERM', () => handle.shutdown().then(() => process.exit(0)))
}

// ---------------------------------------------------------------- bench side

function startServer (name, spec) {
  return startServed(__filename, ['--serve', JSON.stringify(spec)], name, { NODE_ENV: 'production' })
}

const stopServer = stopServed

async function deleteKeys (pattern) {
  const Redis = require('ioredis')
  const client = new Redis(REDIS_URL)
  try {
    let cursor = '0'
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
      cursor = next
      if (keys.length) await client.del(keys)
    } while (cursor !== '0')
  } finally {
    client.disconnect()
  }
}

function contenders (run, abDir) {
  const list = [
    { name: 'MemoryStore, 1 process (anchor)', spec: { store: 'memory' } },
    { name: 'ClusterStore, 2 workers', spec: { store: 'cluster', workers: 2, prefix: 'a:' } },
    { name: 'ClusterStore, 2 workers, bus.redis', spec: { store: 'cluster', workers: 2, prefix: 'b:', bus: { redis: REDIS_URL, channel: run } }, redis: true },
    { name: 'rate-limit-redis, 2 workers', spec: { store: 'rate-limit-redis', workers: 2, prefix: `${run}:rlr:` }, redis: true },
    { name: 'MemoryStore, 2 workers (per-worker counts: wrong limits; reference)', spec: { store: 'memory', workers: 2 } }
  ]
  if (abDir) {
    // The same Redis-backed row from another checkout (its own channel, so its own keys).
    const label = path.basename(path.resolve(abDir))
    list.push({ name: `ClusterStore, 2 workers, bus.redis (A/B: ${label})`, spec: { store: 'cluster', workers: 2, prefix: 'b:', bus: { redis: REDIS_URL, channel: run + ':ab' }, module: path.resolve(abDir) }, redis: true })
  }
  return list
}

async function main () {
  const durationSec = arg('--duration', 3, 1)
  const rounds = arg('--rounds', 3, 1)
  const connections = arg('--connections', 50)
  const latencyRate = arg('--latency-rate', 2000)
  const latencySeconds = arg('--latency-seconds', 3, 0.5)
  const latencyPasses = arg('--latency-passes', 2, 1)
  const abDir = abDirArg()
  const run = `bench-rl-${process.pid}`
  const redis = await redisReachable(REDIS_URL)
  const list = contenders(run, abDir)
  const loadBefore = os.loadavg()[0]
  for (const contender of list) {
    if (contender.redis && !redis) contender.skipped = 'skipped: Redis not reachable'
  }
  const live = list.filter((contender) => !contender.skipped)
  try {
    // One at a time: fifteen processes loading at once on two cores start slower than in turn.
    for (const contender of live) {
      contender.server = await startServer(contender.name, contender.spec)
      await runAutocannon({ port: contender.server.port, connections, durationSec: isQuick() ? 0.5 : 1 }) // warm-up
      contender.rps = []
      contender.p99 = []
      contender.failed = 0
      contender.paced = []
    }
    for (let round = 0; round < rounds; round++) {
      for (const contender of rotated(live, round)) {
        const result = await runAutocannon({ port: contender.server.port, connections, durationSec })
        contender.rps.push(result.rps)
        contender.p99.push(result.p99)
        contender.failed += result.errors + result.non2xx
        process.stderr.write(`round ${round + 1}: ${contender.name}: ${fmt(result.rps)} req/s, p99 ${result.p99} ms\n`)
      }
    }
    for (let pass = 0; pass < latencyPasses; pass++) {
      for (const contender of rotated(live, pass)) {
        const paced = await pacedLatency({ port: contender.server.port, path: '/', rate: latencyRate, seconds: latencySeconds, connections: 20 })
        contender.paced.push(paced)
        process.stderr.write(`paced pass ${pass + 1}: ${contender.name}: p50 ${fmt(paced.p50, 2)} ms, p99 ${fmt(paced.p99, 2)} ms\n`)
      }
    }
  } finally {
    await Promise.all(live.filter((contender) => contender.server).map((contender) => stopServer(contender.server)))
  }
  if (redis) await deleteKeys(`${run}*`)
  const loadAfter = os.loadavg()[0]
  printThroughput(list, { connections, durationSec, rounds })
  printLatency(list, { rate: latencyRate, seconds: latencySeconds, passes: latencyPasses })
  console.log(`\n_Shared machine: load average ${loadBefore.toFixed(2)} at the start, ${loadAfter.toFixed(2)} at the end, on ${os.cpus().length} CPUs._`)
  console.log(machineLine())
}

function printThroughput (list, run) {
  const anchor = median(list[0].rps || [])
  const rows = list.map((contender) => {
    if (contender.skipped) return [contender.name, contender.skipped, '', '', '', '']
    const rps = median(contender.rps)
    return [contender.name, fmt(rps), ratio(rps, anchor), fmt(median(contender.p99), 1), contender.rps.map((v) => fmt(v)).join(' / '), fmt(contender.failed)]
  })
  console.log(`### Rate limit: express-rate-limit on every request (${run.connections} connections, ${plural(run.rounds, 'round')} x ${run.durationSec} s, order rotated each round; medians)\n`)
  console.log(markdownTable(['Store', 'req/s', 'vs anchor', 'p99 ms', 'req/s per round', 'errors + non-2xx'], rows))
}

/**
 * p50/p99 at a steady rate every store holds: each store's own tail, not the
 * queue a saturated round builds (bench/lib/load.js runPaced).
 */
function printLatency (list, run) {
  const anchor = median((list[0].paced || []).map((p) => p.p99))
  const rows = list.map((contender) => {
    if (contender.skipped) return [contender.name, contender.skipped, '', '', '', '']
    const p99s = contender.paced.map((p) => p.p99)
    const p99 = median(p99s)
    const errors = contender.paced.reduce((sum, p) => sum + p.errors, 0)
    return [contender.name, fmt(median(contender.paced.map((p) => p.p50)), 2), fmt(p99, 2), ratio(p99, anchor), p99s.map((v) => fmt(v, 2)).join(' / '), fmt(errors)]
  })
  console.log(`\n### Rate limit: latency at a paced ${fmt(run.rate)} req/s (20 kept-alive connections, ${plural(run.passes, 'rotated pass', 'rotated passes')} x ${run.seconds} s; medians)\n`)
  console.log(markdownTable(['Store', 'p50 ms', 'p99 ms', 'p99 vs anchor', 'p99 per pass', 'errors'], rows))
}

function plural (n, one, many) {
  return `${n} ${n === 1 ? one : (many || one + 's')}`
}
