'use strict'

/**
 * Sessions side by side, one run: requests/s with a session read + write per
 * request (GET /count: visits++), for
 *   - express-session's MemoryStore, single process (the anchor)
 *   - express-session's MemoryStore in 2 workers (per-worker sessions: broken
 *     semantics, shown only as the cluster scaling reference on this machine)
 *   - our cluster store, 1 worker and 2 workers (per-worker throughput too)
 *   - our Redis store, single process and 2 workers (needs Redis at REDIS_URL
 *     or redis://127.0.0.1:6379; skipped with a note otherwise)
 *   - our Redis store, 2 workers, on a 3-master Redis Cluster (+ 3 replicas) and
 *     on a Sentinel-managed primary (+ 2 replicas, 3 sentinels), both started
 *     here on loopback from redis-server (skipped when it is not installed)
 * Then a failover table: 2 workers under session traffic while the Redis
 * primary (Sentinel) or a cluster master is killed: 503s, wrong answers and
 * the time from the kill to the last 503 (median of --failovers runs).
 * Prints Markdown tables with ratios. Loopback only, bounded (< 3 min), every
 * process started is stopped by PID.
 *
 * --read-only measures GET /read instead (the session is read, not
 * modified: express-session touches it, which is where the Redis store's
 * touch round trips show).
 *
 * Then CPU per request of each process (primary, workers, redis-server) at a
 * fixed rate (--cpu-rate req/s for --cpu-seconds), for the 2-worker rows.
 *
 *   node bench/sessions.js [--duration 3] [--passes 3] [--connections 20] [--failovers 3] [--read-only]
 *                          [--cpu-rate 2000] [--cpu-seconds 4]
 */

const { numberArg: arg } = require('./lib/args')
const { cpuMs } = require('./lib/proc')
const path = require('path')
const crypto = require('crypto')
const http = require('http')
const { fork } = require('child_process')

const SECRET = 'bench-secret-0123456789-abcdefghijklmnop'
const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379'
const SESSIONS_PER_RUN = 20

if (process.argv[2] === '--serve') {
  serve(process.argv[3], JSON.parse(process.argv[4] || '{}'))
} else {
  main().catch((err) => {
    process.stderr.write(err.stack + '\n')
    process.exitCode = 1
  })
}

// ---------------------------------------------------------------- server side

function createApp (store, prefix, redis) {
  const express = require('express')
  const app = express()
  if (store === 'raw-memory') {
    // TCP_NODELAY as session() sets it, so the reference is not skewed by Nagle stalls
    // on the split writes express-session makes (see middleware/session.js).
    app.use((req, res, next) => { req.socket.setNoDelay(true); next() })
    const expressSession = require('express-session')
    app.use(expressSession({ secret: SECRET, resave: false, saveUninitialized: false, store: new expressSession.MemoryStore() }))
  } else {
    const { session } = require('..')
    app.use(session({ secret: SECRET, store, redis: store === 'redis' ? (redis || REDIS_URL) : undefined, prefix }))
  }
  app.post('/login', (req, res) => {
    req.session.user = { name: 'bench', roles: ['reader'] }
    req.session.visits = 0
    res.json({ pid: process.pid })
  })
  app.get('/read', (req, res) => {
    res.json({ visits: req.session.visits, pid: process.pid })
  })
  app.get('/count', (req, res) => {
    req.session.visits++
    res.json({ visits: req.session.visits, pid: process.pid })
  })
  return app
}

function serve (mode, spec) {
  if (spec.workers === undefined) {
    const server = http.createServer(createApp(spec.store, spec.prefix, spec.redis))
    server.keepAliveTimeout = 65000
    server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port, pids: [process.pid] }))
    return
  }
  const { clusterize } = require('..')
  const handle = clusterize(() => createApp(spec.store, spec.prefix, spec.redis), { port: 0, host: '127.0.0.1', workers: spec.workers, bus: spec.bus, logger: false })
  if (!handle.ready || typeof handle.on !== 'function') return // a worker
  handle.ready.then((info) => {
    process.send({ port: info.port, pids: [process.pid].concat(info.workers.map((w) => w.pid)) })
  }, (err) => {
    process.send({ error: err.message })
  })
  process.on('SIGTERM', () => handle.shutdown().then(() => process.exit(0)))
}

// ---------------------------------------------------------------- bench side

function startServer (mode, spec) {
  const child = fork(__filename, ['--serve', mode, JSON.stringify(spec)], {
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    env: Object.assign({}, process.env, { NODE_ENV: 'development', DEBUG: '' })
  })
  let stderr = ''
  child.stderr.on('data', (chunk) => { stderr += chunk })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { kill([child.pid]); reject(new Error(`${mode}: not ready in 20 s\n${stderr}`)) }, 20000)
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${mode}: server exited (${code})\n${stderr}`)) })
    child.once('message', (msg) => {
      clearTimeout(timer)
      if (msg.error) { kill([child.pid]); return reject(new Error(`${mode}: ${msg.error}`)) }
      resolve({ child, port: msg.port, pids: msg.pids })
    })
  })
}

function kill (pids) {
  for (const pid of pids) {
    try { process.kill(pid, 'SIGKILL') } catch {}
  }
}

async function stopServer (server) {
  server.child.removeAllListeners('exit') // the "exited before ready" rejection
  const exited = new Promise((resolve) => {
    if (server.child.exitCode !== null || server.child.signalCode !== null) return resolve()
    server.child.once('exit', resolve)
  })
  try { process.kill(server.child.pid, 'SIGTERM') } catch {}
  const timer = setTimeout(() => kill([server.child.pid]), 5000)
  await exited
  clearTimeout(timer)
  kill(server.pids.slice(1)) // any worker still alive
}

function login (port) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/login', method: 'POST', agent: false }, (res) => {
      res.resume()
      const cookie = (res.headers['set-cookie'] || []).find((c) => c.startsWith('connect.sid='))
      if (res.statusCode !== 200 || !cookie) return reject(new Error(`login answered ${res.statusCode}`))
      resolve(cookie.split(';')[0])
    })
    req.on('error', reject)
    req.end()
  })
}

async function prepare (port) {
  const cookies = []
  for (let i = 0; i < SESSIONS_PER_RUN; i++) cookies.push(await login(port))
  return cookies
}

/**
 * autocannon on the bench route, each connection with one of the logged-in cookies.
 * @param {{ duration: number, connections: number, overallRate?: number }} load
 */
function runLoad (port, cookies, load) {
  const autocannon = require('autocannon')
  let next = 0
  return autocannon(Object.assign({
    url: `http://127.0.0.1:${port}${process.argv.includes('--read-only') ? '/read' : '/count'}`,
    setupClient (client) { client.setHeaders({ cookie: cookies[next++ % cookies.length] }) }
  }, load))
}

async function measure (port, cookies, duration, connections) {
  const result = await runLoad(port, cookies, { duration, connections })
  return { rps: result.requests.average, non2xx: result.non2xx, errors: result.errors, p99: result.latency.p99 }
}

async function redisReachable () {
  const Redis = require('ioredis')
  const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000 })
  client.on('error', () => {})
  try {
    await client.connect()
    await client.ping()
    return true
  } catch {
    return false
  } finally {
    client.disconnect()
  }
}

/** The pid of the Redis at REDIS_URL when it runs on this machine (its CPU is then readable), else null. */
async function localRedisPid () {
  const Redis = require('ioredis')
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0 })
  client.on('error', () => {})
  try {
    await client.connect()
    const pid = Number(/process_id:(\d+)/.exec(await client.info('server'))[1])
    return Number.isNaN(cpuMs(pid)) ? null : pid
  } catch {
    return null
  } finally {
    client.disconnect()
  }
}

/**
 * Microseconds of CPU per request for the primary, the workers and Redis, while
 * autocannon sends `rate` req/s for `seconds` (fixed rate: the cost per request
 * does not depend on how fast the machine happens to be during the run).
 */
async function measureCpu (server, cookies, rate, seconds, redisPid) {
  const workers = server.pids.slice(1)
  const pids = server.pids.concat(redisPid === null ? [] : [redisPid])
  const before = pids.map(cpuMs)
  const result = await runLoad(server.port, cookies, { duration: seconds, connections: 20, overallRate: rate })
  const spent = pids.map((pid, i) => (cpuMs(pid) - before[i]) * 1000)
  const n = result.requests.total || 1
  const perRequest = (i) => spent[i] / n
  return {
    primary: perRequest(0),
    workers: workers.reduce((sum, pid, i) => sum + perRequest(i + 1), 0),
    redis: redisPid === null ? null : perRequest(pids.length - 1),
    errors: result.errors + result.non2xx
  }
}

function printCpu (rows, run) {
  const measured = rows.filter((r) => r.cpu && r.cpu.length > 0)
  if (measured.length === 0) return
  const total = (c) => c.primary + c.workers + (c.redis || 0)
  const medianOf = (r, key) => median(r.cpu.map(key))
  const anchor = measured.find((r) => r.scalingRef)
  const anchorTotal = anchor ? medianOf(anchor, total) : NaN
  const out = []
  out.push(`### Where the time goes: CPU per request at a fixed ${run.rate} req/s (2 workers, ${run.seconds} s, median of ${run.passes}; user + system from /proc, 10 ms ticks)`)
  out.push('')
  out.push('| store | primary µs/req | workers µs/req | redis-server µs/req | total µs/req | total vs MemoryStore, 2 workers | errors |')
  out.push('|---|---:|---:|---:|---:|---:|---:|')
  for (const r of measured) {
    const t = medianOf(r, total)
    const redis = r.cpu[0].redis === null ? '-' : medianOf(r, (c) => c.redis).toFixed(1)
    const errors = r.cpu.reduce((sum, c) => sum + c.errors, 0)
    out.push(`| ${r.name} | ${medianOf(r, (c) => c.primary).toFixed(1)} | ${medianOf(r, (c) => c.workers).toFixed(1)} | ${redis} | ${t.toFixed(1)} | ${(t / anchorTotal).toFixed(2)}x | ${errors} |`)
  }
  out.push('')
  out.push('The load generator (autocannon, in this process) is not counted; on these 2-core machines it takes a share of the same CPUs, so every extra microsecond per request in any of these processes lowers the req/s above.')
  console.log(out.join('\n') + '\n')
}

async function cleanRedis (prefix) {
  const Redis = require('ioredis')
  const client = new Redis(REDIS_URL)
  let cursor = '0'
  do {
    const [c, keys] = await client.scan(cursor, 'MATCH', prefix + '*', 'COUNT', 1000)
    cursor = c
    if (keys.length) await client.del(keys)
  } while (cursor !== '0')
  client.disconnect()
}

async function main () {
  const duration = arg('--duration', 3)
  const passes = arg('--passes', 3)
  const connections = arg('--connections', 20)
  const cpuRate = arg('--cpu-rate', 2000)
  const cpuSeconds = arg('--cpu-seconds', 4)
  const prefix = `cz-bench:${process.pid}:${crypto.randomBytes(3).toString('hex')}:`
  const haveRedis = await redisReachable()
  const scenarios = [
    { name: 'express-session MemoryStore, 1 process', spec: { store: 'raw-memory' }, workers: 1, anchor: true },
    { name: 'express-session MemoryStore, 2 workers (per-worker sessions: reference only)', spec: { store: 'raw-memory', workers: 2 }, workers: 2, scalingRef: true },
    { name: 'cluster store, 1 worker', spec: { store: 'cluster', workers: 1 }, workers: 1 },
    { name: 'cluster store, 2 workers', spec: { store: 'cluster', workers: 2 }, workers: 2 },
    { name: 'Redis store, 1 process', spec: { store: 'redis', prefix }, workers: 1, redis: true },
    { name: 'Redis store, 2 workers', spec: { store: 'redis', prefix, workers: 2 }, workers: 2, redis: true },
    { name: 'Redis store, 2 workers, Redis Cluster (3 masters + 3 replicas)', spec: { store: 'redis', prefix, workers: 2 }, workers: 2, topology: 'cluster' },
    { name: 'Redis store, 2 workers, Sentinel (primary + 2 replicas)', spec: { store: 'redis', prefix, workers: 2 }, workers: 2, topology: 'sentinel' }
  ]
  const topologies = await startTopologies()
  for (const scenario of scenarios) {
    if (!scenario.topology) continue
    if (!topologies) scenario.skipped = 'redis-server is not installed'
    else scenario.spec.redis = topologies[scenario.topology].url
  }
  const started = Date.now()
  const live = []
  try {
    // Every server is started first and measured in interleaved passes (best of
    // `passes`), so a burst of load from elsewhere on a shared machine does not
    // land on one store only. Idle servers cost next to nothing.
    for (const scenario of scenarios) {
      if (scenario.redis && !haveRedis) {
        scenario.skipped = `no Redis at ${REDIS_URL}`
        continue
      }
      try {
        scenario.server = await startServer(scenario.name, scenario.spec)
        live.push(scenario.server)
        scenario.cookies = await prepare(scenario.server.port)
        await measure(scenario.server.port, scenario.cookies, 1, connections) // warm-up
      } catch (err) {
        scenario.skipped = 'failed: ' + err.message.split('\n')[0]
      }
    }
    for (let pass = 0; pass < passes; pass++) {
      for (const scenario of scenarios) {
        if (scenario.skipped) continue
        const result = await measure(scenario.server.port, scenario.cookies, duration, connections)
        if (!scenario.best || result.rps > scenario.best.rps) scenario.best = result
        scenario.errors = (scenario.errors || 0) + result.errors + result.non2xx
      }
    }
    // Where the time goes: CPU per request of each process, at a fixed rate every server can hold.
    const redisPid = haveRedis ? await localRedisPid() : null
    for (let pass = 0; pass < passes; pass++) {
      for (const scenario of scenarios) {
        if (scenario.skipped || scenario.workers !== 2 || scenario.topology) continue
        const cpu = await measureCpu(scenario.server, scenario.cookies, cpuRate, cpuSeconds, scenario.spec.store === 'redis' ? redisPid : null)
        ;(scenario.cpu = scenario.cpu || []).push(cpu)
      }
    }
  } finally {
    for (const server of live) await stopServer(server)
    if (haveRedis) await cleanRedis(prefix)
  }
  const rows = scenarios.map((scenario) => scenario.skipped
    ? scenario
    : Object.assign({}, scenario, scenario.best, { errors: scenario.errors, non2xx: 0 }))
  print(rows, { duration, passes, connections, seconds: (Date.now() - started) / 1000 })
  printCpu(rows, { rate: cpuRate, seconds: cpuSeconds, passes })
  if (!topologies) return
  try {
    const failovers = []
    for (const kind of ['sentinel', 'cluster']) {
      failovers.push(await measureFailovers(kind, topologies[kind], arg('--failovers', 3)))
    }
    printFailovers(failovers)
  } finally {
    await topologies.stop()
  }
}

/** A Redis Cluster and a Sentinel setup on loopback, or null without redis-server. */
async function startTopologies () {
  const { redisServerPath } = require('../test/helpers/redis')
  if (!redisServerPath()) return null
  const { startRedisCluster, startSentinel } = require('../test/helpers/redis-topology')
  const cluster = await startRedisCluster()
  let sentinel
  try {
    sentinel = await startSentinel()
  } catch (err) {
    await cluster.stop()
    throw err
  }
  return { cluster, sentinel, stop: () => Promise.all([cluster.stop(), sentinel.stop()]) }
}

/**
 * `runs` failovers of one topology, each under checked session traffic on 2
 * workers (test/helpers/session-load.js: a 503 must carry Retry-After, a wrong
 * answer is a silent new session, another user's session or a count going back).
 */
async function measureFailovers (kind, topology, runs) {
  const { logInUsers, runSessionLoad, visitAll, markSynced } = require('../test/helpers/session-load')
  const { startCluster } = require('../test/helpers/cluster')
  // The test suite's session app and primary: /login?user= and /me (read + write, names the user).
  const server = await startCluster(path.join(__dirname, '..', 'test', 'fixtures', 'session-cluster.js'), {
    env: {
      CZ_SESSION_OPTIONS: JSON.stringify({ store: 'redis', redis: topology.url, prefix: `cz-bench-fo:${process.pid}:` }),
      CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, logger: false })
    }
  })
  const results = []
  try {
    for (let run = 0; run < runs; run++) {
      const users = await logInUsers(server.port, 20, `${kind}-${run}`)
      await topology.syncReplicas()
      markSynced(users)
      const load = runSessionLoad(server.port, users)
      await new Promise((resolve) => setTimeout(resolve, 1000))
      const killedAt = Date.now()
      // On the cluster: the master of one slot, which holds about a third of the sessions.
      if (kind === 'cluster') await topology.failOver(await topology.masterFor(`failover-${run}`))
      else await topology.failOver()
      const promotedAt = Date.now()
      await new Promise((resolve) => setTimeout(resolve, 3000))
      const tally = await load.stop()
      const after = await visitAll(server.port, users)
      results.push({
        failoverMs: promotedAt - killedAt,
        unavailable: tally.unavailable,
        wrong: tally.wrong.length,
        rolledBack: tally.rolledBack,
        ok: tally.ok,
        recoveredMs: tally.lastUnavailableAt === null ? 0 : tally.lastUnavailableAt - killedAt,
        keptAfter: after.filter((o) => o === 'ok').length + '/' + users.length
      })
      // The killed node comes back as a replica, so the next run has one to promote.
      await topology.restartKilled()
    }
  } finally {
    await server.stop()
  }
  return { kind, results }
}

function median (values) {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

function printFailovers (failovers) {
  const out = ['', '### Redis failover under session traffic (2 workers, 20 users, checked answers; median of ' + failovers[0].results.length + ' runs)', '']
  out.push('| topology | kill -> replica promoted, ms | requests answered 503 (+ Retry-After) | wrong answers | answers rolled back by async replication | kill -> last 503, ms | right answers | sessions readable after |')
  out.push('|---|---:|---:|---:|---:|---:|---:|---:|')
  for (const { kind, results } of failovers) {
    const name = kind === 'cluster' ? 'Redis Cluster, master of the slot killed' : 'Sentinel, primary killed'
    out.push(`| ${name} | ${median(results.map((r) => r.failoverMs))} | ${median(results.map((r) => r.unavailable))} | ${results.reduce((sum, r) => sum + r.wrong, 0)} | ${median(results.map((r) => r.rolledBack))} | ${median(results.map((r) => r.recoveredMs))} | ${median(results.map((r) => r.ok))} | ${results.map((r) => r.keptAfter).join(', ')} |`)
  }
  out.push('')
  out.push('"kill -> replica promoted": when the topology helper sees the replica serving (cluster-node-timeout / down-after-milliseconds 1000 ms); "kill -> last 503": when the app last answered 503, i.e. the service was whole again after it. Wrong answers are summed over all runs (the goal is 0): a silent new session, another user\'s session, a 500, or a count older than what the replicas held at the last WAIT. "Rolled back": a count that went back to what the promoted replica had, i.e. writes the old primary acknowledged but had not replicated yet (Redis replication is asynchronous).')
  process.stdout.write(out.join('\n') + '\n')
}

function print (rows, run) {
  const anchor = rows.find((r) => r.anchor)
  const ref = rows.find((r) => r.scalingRef && !r.skipped)
  const out = []
  out.push(`### Sessions: ${process.argv.includes('--read-only') ? 'read only (GET /read: express-session touches)' : 'read + write'} per request (node ${process.version}, ${require('os').availableParallelism ? require('os').availableParallelism() : require('os').cpus().length} CPUs, ${run.connections} connections, best of ${run.passes} interleaved ${run.duration} s runs, ${SESSIONS_PER_RUN} sessions)`)
  out.push('')
  out.push('| store | req/s | per worker | vs MemoryStore (1 process) | per worker vs MemoryStore, same worker count | p99 ms | errors + non-2xx |')
  out.push('|---|---:|---:|---:|---:|---:|---:|')
  for (const row of rows) {
    if (row.skipped) {
      out.push(`| ${row.name} | skipped: ${row.skipped} | | | | | |`)
      continue
    }
    const perWorker = row.rps / row.workers
    const sameCount = row.workers === 1 ? anchor : ref
    const vsSame = sameCount && !row.anchor && !row.scalingRef ? (row.rps / sameCount.rps).toFixed(2) + 'x' : ''
    out.push(`| ${row.name} | ${Math.round(row.rps)} | ${Math.round(perWorker)} | ${(row.rps / anchor.rps).toFixed(2)}x | ${vsSame} | ${row.p99} | ${row.errors} |`)
  }
  out.push('')
  out.push('"per worker vs MemoryStore, same worker count": the store\'s cost per worker, against express-session\'s MemoryStore run with the same number of processes (1 process for 1 worker; MemoryStore in 2 workers for 2 workers).')
  out.push(`Total run time ${run.seconds.toFixed(1)} s.`)
  process.stdout.write(out.join('\n') + '\n')
}
