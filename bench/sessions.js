'use strict'

/**
 * Sessions side by side, one run: requests/s and p99 with a session read +
 * write per request (GET /count: visits++), 20 connections each with its own
 * session, for
 *   - the recipe most users run today, the anchor: express-session +
 *     connect-redis + ioredis on raw node:cluster, 2 workers
 *   - express-session's MemoryStore in 2 workers (per-worker sessions: broken
 *     semantics, shown only as the ceiling of a store that costs nothing)
 *   - our cluster store and our Redis store, 2 workers
 *   - (not with --quick) our Redis store on a 3-master Redis Cluster and on a
 *     Sentinel-managed primary, started here on loopback from redis-server
 *   - with --ab <dir> (or BENCH_CLUSTERIZE_MODULE=<dir>): our two stores again,
 *     loaded from another checkout, as A/B rows of the same run
 *   - with --runtime-rows: the recipe's middleware in clusterize's workers, and
 *     MemoryStore on raw node:cluster (what the worker runtime costs apart
 *     from our session() and stores; the latter is in every wrk run)
 *   - with --busy <n>: n processes that each spin a core run beside every
 *     measurement (after the warm-up), for the busy-box table
 *   - with --steal <on>/<off>[@<cores>] (root): an unsteady box, from after the
 *     warm-up to the last measurement: on each core (or those listed, e.g. @1) a
 *     real-time process takes the core for <on> ms in every <on>+<off>
 *     (bench/lib/busy.js), as a hypervisor's steal does
 *   - with --gc-rows: our two stores again with V8's own young-generation size
 *     (maxSemiSpaceMB: 0) instead of the workers' default 16 MB semi-space, and
 *     a table of each row's worker RSS after the saturated rounds
 * Every server is started first, then measured in rounds with the order
 * rotated each round; medians of the rounds, and the median of same-round
 * ratios against the recipe; the core's own speed is sampled before each
 * measurement (bench/lib/box-speed.js) and its spread printed. Then CPU per
 * request of each process at a fixed rate, p50/p99 at a paced fixed rate (--latency-rate, default the CPU rate), and (not with --quick) a failover table: 2 workers under session
 * traffic while the Redis primary (Sentinel) or a cluster master is killed.
 * Needs Redis at REDIS_URL or redis://127.0.0.1:6379 (rows that need it are
 * skipped with a note otherwise). Loopback only, bounded, every process
 * started is stopped by PID.
 *
 * --read-only measures GET /read instead (the session is read, not
 * modified: express-session touches it). --max-age <ms> gives every server's
 * cookie that maxAge (without it: browser-session cookies, each store's
 * default ttl; session() skips a needless touch only with an expiry).
 *
 * The req/s table is measured with wrk where it is installed (--load wrk), as
 * the issue's outside measurement did (keep-alive, one wrk thread per
 * connection, each connection with its own logged-in session throughout): it
 * costs far less CPU per request than autocannon, which runs in this process
 * (--load autocannon, and the fallback without wrk). Under wrk the table also
 * has MemoryStore on raw node:cluster, with no code of ours, so the saturated
 * p99 of a store that costs nothing stands beside the others. The CPU table
 * stays on autocannon (it needs a fixed rate, which wrk does not offer). With
 * --spread-sessions, wrk -t1 gives each request the next session in turn
 * instead, so every session is read and written by both workers.
 *
 *   node bench/sessions.js [--quick] [--duration 3] [--passes 4] [--connections 20] [--failovers 3] [--load wrk|autocannon]
 *                          [--spread-sessions] [--read-only] [--max-age ms] [--cpu-rate 2000] [--latency-rate 2000] [--cpu-seconds 4] [--latency-seconds 4] [--ab <dir>] [--runtime-rows] [--gc-rows] [--busy 1] [--steal 3/3[@1]]
 */

const { numberArg: arg, isQuick, abDirArg } = require('./lib/args')
const { threadsCpuMs, rssMiB } = require('./lib/proc')
const { median, sameRoundMedian, ratio, times, fmt, markdownTable } = require('./lib/table')
const path = require('path')
const crypto = require('crypto')
const http = require('http')
const { startServed, stopServed } = require('./lib/served')
const { redisReachable } = require('./lib/redis')
const { cpuSample, otherCores } = require('./lib/other-load')
const { otherWorkLabel } = require('./lib/results')
const { rotated } = require('./lib/rounds')
const { hasWrk, wrkRun, wrkCookieScript } = require('./lib/wrk')
const { SAMPLE_MS } = require('./lib/load')
const { createBoxSpeed } = require('./lib/box-speed')
const { startCpuBurners, startCoreStealers, stealArg } = require('./lib/busy')
const { startCpuShare, autogroupEnabled } = require('./lib/cpu-share')

const SECRET = 'bench-secret-0123456789-abcdefghijklmnop'
const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379'
const SESSIONS_PER_RUN = 20
const RECIPE = 'recipe: express-session + connect-redis + ioredis, raw node:cluster'
const RAW_CEILING = 'express-session MemoryStore on raw node:cluster (ceiling, no code of ours)'

if (process.argv[2] === '--serve') {
  serve(process.argv[3], JSON.parse(process.argv[4] || '{}'))
} else if (require.main === module) {
  main().catch((err) => {
    process.stderr.write(err.stack + '\n')
    process.exitCode = 1
  })
}

// ---------------------------------------------------------------- server side

/** The session middleware each kind of server runs. */
function sessionMiddleware (spec) {
  const expressSession = require('express-session')
  // --max-age: the same cookie.maxAge everywhere (without it, browser-session cookies and each store's default ttl).
  const cookie = spec.maxAge ? { maxAge: spec.maxAge } : undefined
  if (spec.store === 'raw-memory') {
    // Each worker has its own MemoryStore, and a connection can land on a worker that does not hold
    // its session (wrk opens its connections at once). express-session would then make a new
    // session with a new id on every request of that connection, since wrk keeps sending the old
    // cookie: a session created per request instead of read and written. Reusing the cookie's id
    // makes that worker hold the session from the connection's first request on.
    return expressSession({ secret: SECRET, resave: false, saveUninitialized: false, cookie, store: new expressSession.MemoryStore(), genid: cookieIdOrNew })
  }
  if (spec.store === 'cluster-plain') {
    // Our cluster store under express-session itself, without session()'s layer (bench/instructions.js).
    const { session } = require(spec.module || '..')
    const store = session({ secret: SECRET, store: 'cluster' }).store
    return expressSession({ secret: SECRET, resave: false, saveUninitialized: false, cookie, store })
  }
  if (spec.store === 'recipe') {
    // As the recipe is written (seed 002, connect-redis's README): its defaults, a plain ioredis client.
    const { RedisStore } = require('connect-redis')
    const Redis = require('ioredis')
    const client = new Redis(spec.redis || REDIS_URL)
    return expressSession({ secret: SECRET, resave: false, saveUninitialized: false, cookie, store: new RedisStore({ client, prefix: spec.prefix }) })
  }
  // BENCH_CLUSTERIZE_MODULE / --ab: the same rows from another checkout.
  const { session } = require(spec.module || '..')
  return session({ secret: SECRET, cookie, store: spec.store, redis: spec.store === 'redis' ? (spec.redis || REDIS_URL) : undefined, prefix: spec.prefix })
}

/** express-session's genid for the per-worker MemoryStore rows: the id the request's cookie carries, else a new one. */
function cookieIdOrNew (req) {
  return req.sessionID || crypto.randomBytes(18).toString('base64url')
}

function createApp (spec) {
  const express = require('express')
  const app = express()
  app.use(sessionMiddleware(spec))
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
    const server = http.createServer(createApp(spec))
    server.keepAliveTimeout = 65000
    server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port, pids: [process.pid] }))
    return
  }
  // The recipe runs on raw node:cluster, every other row in clusterize's workers, unless the row says.
  if ((spec.runtime || (spec.store === 'recipe' ? 'raw' : 'clusterize')) === 'raw') return serveRawCluster(spec)
  const { clusterize } = require(spec.module || '..')
  const options = { port: 0, host: '127.0.0.1', workers: spec.workers, logger: false }
  // --gc-rows only (a checkout from before the option, --ab, would refuse it).
  if (spec.maxSemiSpaceMB !== undefined) options.maxSemiSpaceMB = spec.maxSemiSpaceMB
  const handle = clusterize(() => createApp(spec), options)
  if (!handle.ready || typeof handle.on !== 'function') return // a worker
  handle.ready.then((info) => {
    process.send({ port: info.port, pids: [process.pid].concat(info.workers.map((w) => w.pid)) })
  }, (err) => {
    process.send({ error: err.message })
  })
  process.on('SIGTERM', () => handle.shutdown().then(() => process.exit(0)))
}

/** The textbook node:cluster server: fork N, each worker listens (port 0 is shared by the workers). */
function serveRawCluster (spec) {
  const cluster = require('cluster')
  if (cluster.isWorker) {
    const server = http.createServer(createApp(spec))
    server.keepAliveTimeout = 65000
    server.listen(0, '127.0.0.1')
    // The Redis client would keep it alive after the primary's disconnect (see SIGTERM below).
    process.once('disconnect', () => server.close(() => process.exit(0)))
    return
  }
  const workers = []
  let listening = 0
  for (let i = 0; i < spec.workers; i++) {
    const worker = cluster.fork()
    workers.push(worker)
    worker.once('listening', (address) => {
      if (++listening === spec.workers) process.send({ port: address.port, pids: [process.pid].concat(workers.map((w) => w.process.pid)) })
    })
  }
  process.on('SIGTERM', () => {
    // Disconnect lets each worker exit on its own (and write a --cpu-prof profile); SIGKILL if it does not.
    for (const worker of workers) worker.disconnect()
    setTimeout(() => {
      for (const worker of workers) worker.process.kill('SIGKILL')
      process.exit(0)
    }, 3000).unref()
    cluster.on('exit', () => {
      if (Object.keys(cluster.workers).length === 0) process.exit(0)
    })
  })
}

// ---------------------------------------------------------------- bench side

function startServer (mode, spec) {
  return startServed(__filename, ['--serve', mode, JSON.stringify(spec)], mode, { NODE_ENV: 'development' })
}

const stopServer = stopServed

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

function benchPath () {
  return process.argv.includes('--read-only') ? '/read' : '/count'
}

/**
 * autocannon on the bench route, each connection with one of the logged-in cookies.
 * @param {{ duration: number, connections: number, overallRate?: number }} load
 */
function runLoad (port, cookies, load) {
  const autocannon = require('autocannon')
  let next = 0
  return autocannon(Object.assign({
    url: `http://127.0.0.1:${port}${benchPath()}`,
    sampleInt: SAMPLE_MS,
    setupClient (client) { client.setHeaders({ cookie: cookies[next++ % cookies.length] }) }
  }, load))
}

/** 'wrk' (--load wrk, as the issue's outside measurement; a script run's default where wrk is installed) or 'autocannon' (in this process). */
function loadGenerator () {
  const index = process.argv.indexOf('--load')
  // Run as a script, wrk where it is installed: the issues' outside measurements use it, and it
  // costs far less CPU per request than autocannon, so the servers, not the load generator, take
  // the cores. bench/regression.js, which borrows measure(), keeps autocannon unless told.
  const fallback = require.main === module && hasWrk() ? 'wrk' : 'autocannon'
  const name = index > 0 ? process.argv[index + 1] : fallback
  if (name !== 'wrk' && name !== 'autocannon') throw new Error(`--load takes wrk or autocannon, got ${name}`)
  if (name === 'wrk' && !hasWrk()) throw new Error('--load wrk: wrk is not installed (Debian package wrk)')
  return name
}

/**
 * --spread-sessions (wrk only): each request carries the next session, so a session's requests
 * spread over every connection and worker (the worst case of the cluster store's read leases).
 */
function spreadSessions () {
  const spread = process.argv.includes('--spread-sessions')
  if (spread && loadGenerator() !== 'wrk') throw new Error('--spread-sessions needs --load wrk')
  return spread
}

async function measure (port, cookies, duration, connections) {
  if (loadGenerator() === 'wrk') {
    const perConnection = !spreadSessions()
    const script = wrkCookieScript(cookies, { perConnection })
    try {
      const result = await wrkRun({ port, connections, threads: perConnection ? connections : 1, seconds: duration, path: benchPath(), script: script.file })
      return { rps: result.rps, non2xx: result.non2xx, errors: result.errors, p99: result.p99 }
    } finally {
      script.remove()
    }
  }
  const result = await runLoad(port, cookies, { duration, connections })
  return { rps: result.requests.total / result.duration, non2xx: result.non2xx, errors: result.errors + result.timeouts, p99: result.latency.p99 }
}

/** The pid of the Redis at REDIS_URL when it runs on this machine (its CPU is then readable), else null. */
async function localRedisPid () {
  const Redis = require('ioredis')
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0 })
  client.on('error', () => {})
  try {
    await client.connect()
    const pid = Number(/process_id:(\d+)/.exec(await client.info('server'))[1])
    return Number.isNaN(threadsCpuMs(pid)) ? null : pid
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
  const before = pids.map(threadsCpuMs)
  const result = await runLoad(server.port, cookies, { duration: seconds, connections: 20, overallRate: rate })
  const spent = pids.map((pid, i) => (threadsCpuMs(pid) - before[i]) * 1000)
  const n = result.requests.total || 1
  const perRequest = (i) => spent[i] / n
  return {
    achieved: result.requests.total / result.duration,
    primary: perRequest(0),
    workers: workers.reduce((sum, pid, i) => sum + perRequest(i + 1), 0),
    redis: redisPid === null ? null : perRequest(pids.length - 1),
    errors: result.errors + result.non2xx
  }
}

/**
 * p50 and p99 at a steady `rate` (bench/lib/load.js runPaced): the same load
 * offered to every store, well under what each holds, so the tail is each
 * store's own and not the queue a saturated round builds.
 */
async function measureLatency (server, cookies, rate, seconds) {
  const { pacedLatency } = require('./lib/load')
  return pacedLatency({
    port: server.port,
    path: benchPath(),
    rate,
    seconds,
    connections: 20,
    headers: (n) => ({ cookie: cookies[n % cookies.length] })
  })
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
      // The node killed in the run before has just come back as a replica: the store may still be
      // reconnecting, and answers 503 + Retry-After until it is (as designed). Wait for it first.
      await untilStoreAnswers(server.port, `${kind}-${run}`)
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

/** Resolve once a login answers 200 (503s retried for up to 30 s); say on stderr how long it took. */
async function untilStoreAnswers (port, label) {
  const { request } = require('../test/helpers/cluster')
  const started = Date.now()
  let refused = 0
  for (;;) {
    const res = await request(port, `/login?user=${label}-probe`, { method: 'POST' })
    if (res.status === 200) break
    if (res.status !== 503 || Date.now() - started > 30000) throw new Error(`login of ${label}-probe answered ${res.status}: ${res.body}`)
    refused++
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  if (refused > 0) console.error(`failover ${label}: the store answered 503 to ${refused} logins before it took one, ${Date.now() - started} ms`)
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

/** The scenarios of this run: the recipe first (the anchor), then ours, then the A/B rows. */
function scenarios (prefix, abDir) {
  const list = [
    { name: RECIPE, spec: { store: 'recipe', prefix: prefix + 'recipe:', workers: 2 }, redis: true, anchor: true },
    { name: 'express-session MemoryStore, clusterize, 2 workers (per-worker sessions: ceiling, not a store)', spec: { store: 'raw-memory', workers: 2 } },
    { name: 'clusterize, cluster store, 2 workers', spec: { store: 'cluster', workers: 2 }, goal: { rps: 1.3, p99: true } },
    { name: 'clusterize, Redis store, 2 workers', spec: { store: 'redis', prefix: prefix + 'ours:', workers: 2 }, redis: true, goal: { rps: 1.0 } }
  ]
  if (abDir) {
    const label = path.basename(path.resolve(abDir))
    list.push(
      { name: `clusterize, cluster store, 2 workers (A/B: ${label})`, spec: { store: 'cluster', workers: 2, module: path.resolve(abDir) } },
      { name: `clusterize, Redis store, 2 workers (A/B: ${label})`, spec: { store: 'redis', prefix: prefix + 'ab:', workers: 2, module: path.resolve(abDir) }, redis: true }
    )
  }
  if (gcRows()) {
    list.push(
      { name: 'clusterize, cluster store, 2 workers, V8\'s default semi-space (maxSemiSpaceMB: 0)', spec: { store: 'cluster', workers: 2, maxSemiSpaceMB: 0 } },
      { name: 'clusterize, Redis store, 2 workers, V8\'s default semi-space (maxSemiSpaceMB: 0)', spec: { store: 'redis', prefix: prefix + 'gc:', workers: 2, maxSemiSpaceMB: 0 }, redis: true }
    )
  }
  const runtimeRows = process.argv.includes('--runtime-rows')
  if (runtimeRows) {
    // The recipe's middleware in clusterize's workers: what clusterize's worker runtime costs
    // apart from our session() and stores.
    list.push({ name: 'recipe in clusterize workers (express-session + connect-redis, no session() of ours)', spec: { store: 'recipe', runtime: 'clusterize', prefix: prefix + 'recipe-cz:', workers: 2 }, redis: true })
  }
  if (runtimeRows || loadGenerator() === 'wrk') {
    // No code of ours and a store that costs nothing: under wrk its saturated p99 shows what the
    // load generator's threads, waiting for the same cores, add at that throughput.
    list.push({ name: RAW_CEILING, spec: { store: 'raw-memory', runtime: 'raw', workers: 2 }, rawCeiling: true })
  }
  if (!isQuick()) {
    list.push(
      { name: 'clusterize, Redis store, 2 workers, Redis Cluster (3 masters + 3 replicas)', spec: { store: 'redis', prefix, workers: 2 }, topology: 'cluster' },
      { name: 'clusterize, Redis store, 2 workers, Sentinel (primary + 2 replicas)', spec: { store: 'redis', prefix, workers: 2 }, topology: 'sentinel' }
    )
  }
  return list
}

async function main () {
  loadGenerator() // a bad --load fails here, before any server starts
  const duration = arg('--duration', 3, 1)
  const passes = arg('--passes', 4, 3)
  const connections = arg('--connections', 20)
  const cpuRate = arg('--cpu-rate', 2000)
  const cpuSeconds = arg('--cpu-seconds', 4, 1)
  const cpuPasses = arg('--cpu-passes', 3, 1)
  const latencyRate = arg('--latency-rate', cpuRate)
  // As long as the CPU passes, or under --quick alone half a second (1,000 requests at 2,000 req/s).
  const latencySeconds = arg('--latency-seconds', cpuSeconds, process.argv.includes('--cpu-seconds') ? cpuSeconds : 0.5)
  const burnerCount = busyArg()
  const steal = stealArg(process.argv, require('os').availableParallelism())
  const abDir = abDirArg()
  const prefix = `cz-bench:${process.pid}:${crypto.randomBytes(3).toString('hex')}:`
  const haveRedis = await redisReachable(REDIS_URL)
  const list = scenarios(prefix, abDir)
  const maxAge = arg('--max-age', 0)
  if (maxAge) for (const scenario of list) scenario.spec.maxAge = maxAge
  const topologies = list.some((s) => s.topology) ? await startTopologies() : null
  for (const scenario of list) {
    if (!scenario.topology) continue
    if (!topologies) scenario.skipped = 'redis-server is not installed'
    else scenario.spec.redis = topologies[scenario.topology].url
  }
  const started = Date.now()
  const loadAtStart = require('os').loadavg()[0]
  // Redis is the machine's daemon, not this script's child: its CPU is counted as the run's own, not as other work.
  const redisPid = haveRedis ? await localRedisPid() : null
  const runPids = redisPid === null ? [] : [redisPid]
  const cpuAtStart = cpuSample(runPids)
  const speed = createBoxSpeed()
  const live = []
  let burners = null
  let stealers = null
  try {
    // Every server is started first and measured in rotated rounds, so a burst of
    // load from elsewhere on a shared machine does not land on one store only.
    // Idle servers cost next to nothing.
    // Started together (start-up is not measured), then warmed up one at a time.
    await Promise.all(list.map(async (scenario) => {
      scenario.rounds = []
      if (scenario.redis && !haveRedis) {
        scenario.skipped = `no Redis at ${REDIS_URL}`
        return
      }
      try {
        scenario.server = await startServer(scenario.name, scenario.spec)
        live.push(scenario.server)
        scenario.cookies = await prepare(scenario.server.port)
      } catch (err) {
        scenario.skipped = 'failed: ' + err.message.split('\n')[0]
      }
    }))
    for (const scenario of list) {
      if (!scenario.skipped) await measure(scenario.server.port, scenario.cookies, isQuick() ? 0.5 : 1, connections) // warm-up
    }
    const measured = list.filter((s) => !s.skipped)
    // A busy box on purpose: processes that each spin a core from here to the last measurement.
    burners = startCpuBurners(burnerCount)
    if (steal) stealers = await startCoreStealers(steal)
    for (let pass = 0; pass < passes; pass++) {
      const round = {}
      for (const scenario of rotated(measured, pass)) {
        speed.sample()
        const share = burners.pids.length > 0 ? startCpuShare({ burners: burners.pids, row: rowPids(scenario, redisPid) }) : null
        round[scenario.name] = await measure(scenario.server.port, scenario.cookies, duration, connections)
        if (share !== null) round[scenario.name].cores = share.stop()
      }
      for (const scenario of measured) scenario.rounds.push(round[scenario.name])
    }
    // Read now, while the young generations are as large as the saturated rounds grew them.
    for (const scenario of measured) scenario.workerRss = scenario.server.pids.slice(1).map(rssMiB)
    // Where the time goes: CPU per request of each process, at a fixed rate every server can hold.
    for (let pass = 0; pass < cpuPasses; pass++) {
      for (const scenario of rotated(measured.filter((s) => !s.topology), pass)) {
        const cpu = await measureCpu(scenario.server, scenario.cookies, cpuRate, cpuSeconds, usesLocalRedis(scenario.spec) ? redisPid : null)
        ;(scenario.cpu = scenario.cpu || []).push(cpu)
        const latency = await measureLatency(scenario.server, scenario.cookies, latencyRate, latencySeconds)
        ;(scenario.latency = scenario.latency || []).push(latency)
      }
    }
  } finally {
    if (burners) await burners.stop()
    if (stealers) await stealers.stop()
    await Promise.all(live.map((server) => stopServer(server)))
    if (haveRedis) await cleanRedis(prefix)
  }
  const other = otherCores(cpuAtStart, cpuSample(runPids))
  const run = { duration, passes, connections, maxAge, loadAtStart, other, burners: burnerCount, steal, seconds: (Date.now() - started) / 1000, speed: speed.summary() }
  print(list, run)
  if (run.burners) printBusyShare(list)
  printCpu(list, { rate: cpuRate, seconds: cpuSeconds, passes: cpuPasses })
  printLatency(list, { rate: latencyRate, seconds: latencySeconds, passes: cpuPasses })
  if (gcRows()) printWorkerRss(list)
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

/** How steady the core's speed was during the run (bench/lib/box-speed.js): a sentence with its leading space, or ''. */
function boxSpeedNote (speed) {
  if (!speed || !Number.isFinite(speed.spread)) return ''
  return ` The core's speed (a fixed HMAC loop's CPU time in this script, sampled before each measurement while the servers were idle) moved by ${speed.spread.toFixed(2)}x between its 10th and 90th percentile over ${speed.samples} samples${speed.spread >= 1.3 ? ': an unsteady box, whose rotated rounds compare rows measured at different speeds' : ''}.`
}

/**
 * 'met' / 'not met' for a row with a goal: both the ratio of the medians and
 * the median of same-round ratios must reach it (and p99 where the goal says
 * so). On a busy box or in short rounds a 'met' is marked as not a claim.
 */
function goalCell (row, anchor, sameRound, caveat) {
  if (!row.goal) return ''
  const parts = [`>= ${row.goal.rps.toFixed(1)}x`]
  let met = row.rps / anchor.rps >= row.goal.rps && sameRound >= row.goal.rps
  if (row.goal.p99) {
    parts.push('p99 <= recipe')
    met = met && row.p99 <= anchor.p99
  }
  if (!met) return `${parts.join(', ')}: **not met**`
  return `${parts.join(', ')}: ${caveat ? `met in this run, ${caveat}: not a claim` : '**met**'}`
}

/**
 * Why a 'met' in this run is not a claim, or null: a busy box, or rounds under 3 s, whose
 * saturated p99 came out 2-6x that of 3 s rounds for the same servers on a quiet box.
 */
function goalCaveat (run, busy) {
  if (run.steal) return 'with cores taken away (--steal)'
  if (busy) return 'on a busy box'
  if (run.duration < 3) return `in rounds of ${run.duration} s`
  return null
}

/**
 * Was the box busy? Busy on purpose under --busy; else other work's share of the cores during the run where it
 * can be read; else the 1-minute load average (which counts this run's own
 * load too) at the start or the end.
 */
function busyBox (run) {
  if (run.burners || run.steal) return true
  const cores = require('os').availableParallelism()
  if (run.other !== null) return otherWorkLabel(run.other, cores) === 'busy box'
  return Math.max(run.loadAtStart, require('os').loadavg()[0]) / cores > 0.5
}

function print (list, run) {
  const rows = list.map((s) => s.skipped
    ? s
    : Object.assign({}, s, {
      rps: median(s.rounds.map((r) => r.rps)),
      p99: median(s.rounds.map((r) => r.p99)),
      errors: s.rounds.reduce((sum, r) => sum + r.errors + r.non2xx, 0)
    }))
  const anchor = rows.find((r) => r.anchor)
  const busy = busyBox(run)
  const table = rows.map((row) => {
    if (row.skipped) return [row.name, 'skipped: ' + row.skipped, '', '', '', '', '', '', '']
    if (!anchor || anchor.skipped) return [row.name, fmt(row.rps), 'n/a', 'n/a', fmt(row.p99, 2), 'n/a', row.rounds.map((r) => fmt(r.rps)).join(' / '), row.errors, '']
    const sameRound = sameRoundMedian(row.rounds, anchor.rounds, (r) => r.rps)
    return [
      row.name,
      fmt(row.rps),
      ratio(row.rps, anchor.rps),
      times(sameRound),
      // The median of an even number of rounds is a mean of two: shown to the wrk's 0.01 ms.
      fmt(row.p99, 2),
      ratio(row.p99, anchor.p99),
      row.rounds.map((r) => fmt(r.rps)).join(' / '),
      row.errors,
      goalCell(row, anchor, sameRound, goalCaveat(run, busy))
    ]
  })
  const out = []
  out.push(`### Sessions: ${process.argv.includes('--read-only') ? 'read only (GET /read: express-session touches)' : 'a read + write per request (GET /count)'}${run.maxAge ? `, cookie maxAge ${run.maxAge} ms` : ''} against the recipe (Node ${process.version}, ${require('os').availableParallelism()} CPUs, ${run.connections} connections each with its own session, ${run.passes} rounds x ${run.duration} s, order rotated each round; medians)`)
  out.push('')
  out.push(markdownTable(['store', 'req/s (median)', 'vs recipe', 'median of same-round ratios', 'p99 ms (median)', 'p99 vs recipe', 'req/s per round', 'errors + non-2xx', 'goal'], table))
  out.push('')
  out.push(`The recipe: express-session (resave false, saveUninitialized false) with connect-redis ${connectRedisVersion()}'s RedisStore on a plain ioredis client, in 2 workers forked by node:cluster that each listen. Ours: session() with its defaults in clusterize's 2 workers. ${loadGenerator() === 'wrk' ? (spreadSessions() ? 'wrk -t1 (--spread-sessions: each request carries the next of the logged-in sessions in turn, so every session is read and written by both workers) runs beside the servers' : `wrk -t${run.connections} (one thread per connection, each connection with its own session throughout) runs beside the servers`) : 'autocannon (each connection with its own session) runs in the bench process'} on the same cores. Total run time ${run.seconds.toFixed(1)} s.` +
    (run.burners ? ` --busy ${run.burners}: ${run.burners} process${run.burners > 1 ? 'es' : ''} spinning a core each ran beside the measurements throughout.` : '') +
    (run.steal ? ` --steal ${run.steal.label}: on ${run.steal.label.includes('@') ? `core ${run.steal.cores.join(', ')} only` : 'each core'} a real-time process took the core ${run.steal.onMs} ms in every ${run.steal.onMs + run.steal.offMs} from the first saturated round to the last measurement, as a hypervisor's steal takes an instance's vCPUs (every row's figures are for that box).` : '') +
    (run.other === null ? '' : ` Other work (not this script, its servers${run.burners ? ', its burners' : ''}${run.steal ? ', its core stealers' : ''} or the local Redis) used ${run.other.toFixed(2)} of ${require('os').availableParallelism()} cores: ${busy ? 'busy box' : 'quiet box'}.`) +
    ceilingNote(rows, anchor) + boxSpeedNote(run.speed))
  process.stdout.write(out.join('\n') + '\n\n')
}

/**
 * What the saturated p99 holds besides the store: the row with no code of ours and a store
 * that costs nothing, set beside the recipe. Facts of this run only; empty without that row.
 */
function ceilingNote (rows, anchor) {
  const ceiling = rows.find((r) => r.rawCeiling && !r.skipped)
  if (!ceiling || !anchor || anchor.skipped) return ''
  return ` The ceiling row runs none of our code: at ${ratio(ceiling.rps, anchor.rps)} the recipe's req/s its p99 is ${ratio(ceiling.p99, anchor.p99)} the recipe's.` +
    ' Every row here is saturated, and its p99 also holds the time the load generator\'s threads wait for the same cores; the paced latency table below compares the stores at one rate.'
}

/** connect-redis does not export its package.json: read it from beside its entry point. */
function connectRedisVersion () {
  try {
    const entry = require.resolve('connect-redis')
    const file = path.join(entry.slice(0, entry.lastIndexOf(path.sep + 'dist' + path.sep)), 'package.json')
    return JSON.parse(require('fs').readFileSync(file, 'utf8')).version
  } catch {
    return '(version unknown)'
  }
}

function printCpu (list, run) {
  const measured = list.filter((r) => r.cpu && r.cpu.length > 0)
  if (measured.length === 0) return
  const total = (c) => c.primary + c.workers + (c.redis || 0)
  const medianOf = (r, key) => median(r.cpu.map(key))
  const anchor = measured.find((r) => r.anchor)
  const rows = measured.map((r) => [
    r.name,
    fmt(medianOf(r, (c) => c.primary), 1),
    fmt(medianOf(r, (c) => c.workers), 1),
    r.cpu[0].redis === null ? '-' : fmt(medianOf(r, (c) => c.redis), 1),
    fmt(medianOf(r, total), 1),
    fmt(medianOf(r, (c) => c.achieved)),
    anchor ? ratio(medianOf(r, total), medianOf(anchor, total)) : 'n/a',
    r.cpu.reduce((sum, c) => sum + c.errors, 0)
  ])
  writeSection(
    `Where the time goes: CPU per request at a fixed rate of ${run.rate} req/s offered (2 workers, ${run.seconds} s, median of ${run.passes} rotated passes; every thread's time on a CPU from /proc/<pid>/task/*/schedstat)`,
    ['store', 'primary µs/req', 'workers µs/req', 'redis-server µs/req', 'total µs/req', 'req/s reached', 'total vs recipe', 'errors'], rows,
    'The load generator (autocannon, in this process) is not counted; on a 2-core machine it takes a share of the same CPUs, so every extra microsecond per request in any of these processes lowers the req/s above.')
}

function printLatency (list, run) {
  const measured = list.filter((r) => r.latency && r.latency.length > 0)
  if (measured.length === 0) return
  const medianOf = (r, key) => median(r.latency.map(key))
  const anchor = measured.find((r) => r.anchor)
  const rows = measured.map((r) => [
    r.name,
    fmt(medianOf(r, (l) => l.p50), 2),
    fmt(medianOf(r, (l) => l.p99), 2),
    anchor ? ratio(medianOf(r, (l) => l.p50), medianOf(anchor, (l) => l.p50)) : 'n/a',
    anchor ? ratio(medianOf(r, (l) => l.p99), medianOf(anchor, (l) => l.p99)) : 'n/a',
    r.latency.map((l) => fmt(l.p99, 1)).join(' / '),
    r.latency.reduce((sum, l) => sum + l.errors, 0)
  ])
  writeSection(
    `Latency at a paced ${run.rate} req/s (2 workers, ${run.seconds} s, up to 20 kept-alive connections, median of ${run.passes} rotated passes)`,
    ['store', 'p50 ms', 'p99 ms', 'p50 vs recipe', 'p99 vs recipe', 'p99 ms per pass', 'errors'], rows,
    'Every store is offered the same steady load, below what each holds, so this p99 is the store\'s own: the saturated rounds\' p99 above also holds the queue that each store\'s throughput builds. Latency runs from the moment a request is handed to the client (a wait for a free connection counts) to its last byte.')
}

/**
 * The processes whose CPU is a row's own: its server's, and the local Redis's for a row that uses
 * it (none for a topology's row: its Redis servers are not followed, so its share is not shown).
 */
function rowPids (scenario, redisPid) {
  if (scenario.topology) return []
  return scenario.server.pids.concat(usesLocalRedis(scenario.spec) && redisPid !== null ? [redisPid] : [])
}

/** Does a row of this spec keep the local Redis busy (the recipe and our Redis store)? */
function usesLocalRedis (spec) {
  return spec.store === 'redis' || spec.store === 'recipe'
}

/**
 * --busy: the share of the machine each row got in its saturated rounds. The goal table compares
 * req/s; this one shows whether the rows competed with the burners on the same terms.
 */
function printBusyShare (list) {
  const measured = list.filter((r) => !r.skipped && r.rounds.length > 0 && r.rounds[0].cores)
  if (measured.length === 0) return
  const anchor = measured.find((r) => r.anchor)
  const perCore = (round) => round.rps / round.cores.row
  const rows = measured.map((r) => {
    const own = median(r.rounds.map((round) => round.cores.row))
    return [
      r.name,
      fmt(median(r.rounds.map((round) => round.cores.burners)), 2),
      r.rounds.map((round) => fmt(round.cores.burners, 2)).join(' / '),
      Number.isFinite(own) ? fmt(own, 2) : '-',
      Number.isFinite(own) ? fmt(median(r.rounds.map(perCore))) : '-',
      Number.isFinite(own) && anchor ? times(sameRoundMedian(r.rounds, anchor.rounds, perCore)) : 'n/a'
    ]
  })
  const autogroup = autogroupEnabled()
  writeSection(
    'The busy box: the share of the machine each row got in its saturated rounds (cores: CPU time over wall time, from /proc/<pid>/task/*/schedstat)',
    ['store', 'burners\' cores (median)', 'burners\' cores per round', 'row\'s own cores (median)', 'req/s per own core (median)', 'vs recipe (median of same-round ratios)'], rows,
    'A row\'s own cores are its primary\'s and workers\' CPU, and for the rows that use it the local Redis\'s; the load generator is not counted. ' +
    (autogroup === true
      ? 'The kernel\'s autogroup scheduling is on (/proc/sys/kernel/sched_autogroup_enabled): CPU is shared between sessions before processes, and every burner, every server and the machine\'s Redis is a session of its own, so a row that also keeps a Redis busy takes more of the box from the burners. Where the burners\' cores differ between rows, the req/s table above compares rows that were given different shares of the machine; req/s per own core does not depend on that share.'
      : autogroup === false
        ? 'The kernel\'s autogroup scheduling is off: every thread competes with the burners on the same terms.'
        : 'The kernel\'s autogroup setting could not be read.'))
}

/** --busy <n>: processes spinning a core each beside every measurement (0: none). */
function busyArg () {
  return arg('--busy', 0)
}

/** --gc-rows: the rows with V8's own young-generation size beside the shipped 16 MB. */
function gcRows () {
  return process.argv.includes('--gc-rows')
}

/** Each row's worker RSS, read right after the saturated rounds (--gc-rows). */
function printWorkerRss (list) {
  const rows = list.filter((r) => r.workerRss).map((r) => [r.name, r.workerRss.map((mib) => fmt(mib)).join(' / '), fmt(median(r.workerRss))])
  writeSection('Worker RSS after the saturated rounds (MiB, from /proc)', ['store', 'each worker', 'median'], rows,
    'What each worker holds once the saturated rounds have grown its heap: with V8\'s own young-generation size (64 MB semi-spaces on Node 24, 32 MB on Node 26) against the workers\' default 16 MB.')
}

/** One table of the report: its heading, the table, and the note under it. */
function writeSection (title, headers, rows, note) {
  process.stdout.write([`### ${title}`, '', markdownTable(headers, rows), '', note].join('\n') + '\n')
}

// bench/regression.js runs the cluster store's rows against another tree with these.
module.exports = { startServer, stopServer, prepare, runLoad, measure, measureCpu }
