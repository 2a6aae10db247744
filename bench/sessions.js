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
 * Prints a Markdown table with ratios. Loopback only, bounded (< 90 s), every
 * process started is stopped by PID.
 *
 * --read-only measures GET /read instead (the session is read, not
 * modified: express-session touches it, which is where the Redis store's
 * touch round trips show).
 *
 *   node bench/sessions.js [--duration 3] [--passes 3] [--connections 20] [--read-only]
 */

const { numberArg: arg } = require('./lib/args')
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

function createApp (store, prefix) {
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
    app.use(session({ secret: SECRET, store, redis: store === 'redis' ? REDIS_URL : undefined, prefix }))
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
    const server = http.createServer(createApp(spec.store, spec.prefix))
    server.keepAliveTimeout = 65000
    server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port, pids: [process.pid] }))
    return
  }
  const { clusterize } = require('..')
  const handle = clusterize(() => createApp(spec.store, spec.prefix), { port: 0, host: '127.0.0.1', workers: spec.workers, logger: false })
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

async function measure (port, cookies, duration, connections) {
  const autocannon = require('autocannon')
  let next = 0
  const result = await autocannon({
    url: `http://127.0.0.1:${port}${process.argv.includes('--read-only') ? '/read' : '/count'}`,
    connections,
    duration,
    setupClient (client) { client.setHeaders({ cookie: cookies[next++ % cookies.length] }) }
  })
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
  const prefix = `cz-bench:${process.pid}:${crypto.randomBytes(3).toString('hex')}:`
  const haveRedis = await redisReachable()
  const scenarios = [
    { name: 'express-session MemoryStore, 1 process', spec: { store: 'raw-memory' }, workers: 1, anchor: true },
    { name: 'express-session MemoryStore, 2 workers (per-worker sessions: reference only)', spec: { store: 'raw-memory', workers: 2 }, workers: 2, scalingRef: true },
    { name: 'cluster store, 1 worker', spec: { store: 'cluster', workers: 1 }, workers: 1 },
    { name: 'cluster store, 2 workers', spec: { store: 'cluster', workers: 2 }, workers: 2 },
    { name: 'Redis store, 1 process', spec: { store: 'redis', prefix }, workers: 1, redis: true },
    { name: 'Redis store, 2 workers', spec: { store: 'redis', prefix, workers: 2 }, workers: 2, redis: true }
  ]
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
  } finally {
    for (const server of live) await stopServer(server)
    if (haveRedis) await cleanRedis(prefix)
  }
  const rows = scenarios.map((scenario) => scenario.skipped
    ? scenario
    : Object.assign({}, scenario, scenario.best, { errors: scenario.errors, non2xx: 0 }))
  print(rows, { duration, passes, connections, seconds: (Date.now() - started) / 1000 })
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
