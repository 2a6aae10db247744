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
 * Keys: 100 clients (the connection's port modulo 100). Needs Redis at REDIS_URL
 * (or redis://127.0.0.1:6379) for the Redis rows, skipped with a note otherwise.
 * Loopback only, bounded (about a minute), every process stopped by PID.
 * The machine is shared: the load average at the start and end is printed with the table.
 *
 *   node bench/rate-limit.js [--duration 5] [--connections 50] [--quick]   (--quick: 1 s per row)
 */

const os = require('os')
const http = require('http')
const { startServed, stopServed } = require('./lib/served')
const { redisReachable } = require('./lib/redis')
const { numberArg: arg } = require('./lib/args')
const { runAutocannon } = require('./lib/load')
const { markdownTable, fmt, ratio } = require('./lib/table')
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
    const { ClusterStore } = require('../rate-limit')
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
  const { clusterize } = require('..')
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

async function main () {
  const durationSec = arg('--duration', process.argv.includes('--quick') ? 1 : 5)
  const connections = arg('--connections', 50)
  const run = `bench-rl-${process.pid}`
  const redis = await redisReachable(REDIS_URL)
  const contenders = [
    { name: 'MemoryStore, 1 process (anchor)', spec: { store: 'memory' } },
    { name: 'ClusterStore, 2 workers', spec: { store: 'cluster', workers: 2, prefix: 'a:' } },
    { name: 'ClusterStore, 2 workers, bus.redis', spec: { store: 'cluster', workers: 2, prefix: 'b:', bus: { redis: REDIS_URL, channel: run } }, redis: true },
    { name: 'rate-limit-redis, 2 workers', spec: { store: 'rate-limit-redis', workers: 2, prefix: `${run}:rlr:` }, redis: true },
    { name: 'MemoryStore, 2 workers (per-worker counts: wrong limits; reference)', spec: { store: 'memory', workers: 2 } }
  ]
  const loadBefore = os.loadavg()[0]
  const rows = []
  let anchor = NaN
  for (const contender of contenders) {
    if (contender.redis && !redis) {
      rows.push([contender.name, 'skipped: Redis not reachable', '', '', ''])
      continue
    }
    const server = await startServer(contender.name, contender.spec)
    try {
      await runAutocannon({ port: server.port, connections, durationSec: 1 }) // warm-up
      const result = await runAutocannon({ port: server.port, connections, durationSec })
      if (Number.isNaN(anchor)) anchor = result.rps
      rows.push([contender.name, fmt(result.rps), ratio(result.rps, anchor), fmt(result.p99, 1), fmt(result.errors + result.non2xx)])
      process.stderr.write(`${contender.name}: ${fmt(result.rps)} req/s, p99 ${result.p99} ms\n`)
    } finally {
      await stopServer(server)
    }
  }
  if (redis) await deleteKeys(`${run}*`)
  const loadAfter = os.loadavg()[0]
  console.log(`### Rate limit: express-rate-limit on every request (${connections} connections, ${durationSec} s each, one run)\n`)
  console.log(markdownTable(['Store', 'req/s', 'vs anchor', 'p99 ms', 'errors + non-2xx'], rows))
  console.log(`\n_Shared machine, busy: load average ${loadBefore.toFixed(2)} at the start, ${loadAfter.toFixed(2)} at the end; one run, so differences under ~15% are noise._`)
  console.log(machineLine())
}
