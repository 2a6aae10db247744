'use strict'

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startCluster, stopAll, request, waitDead } = require('./helpers/cluster')
const { startLoad } = require('./helpers/load')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const env = (options, extra) => Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options) }, extra)

after(stopAll)

test('two reloads in a row under keep-alive load: zero failed requests, zero non-2xx, every pid replaced', async () => {
  // A 1 s bake (the default is 5 s): each reload still holds its canary and its predecessors
  // through a bake; the default's longer wait adds time, not behaviour.
  const cluster = await startCluster(fixture, { env: env({ workers: 2, reload: { bakeMs: 1000 } }) })
  const before = new Set(cluster.workerPids)
  // Paced: an unpaced Node 24 would send the load's 200,000 requests before the reloads end.
  const load = startLoad({ port: cluster.port, connections: 8, durationMs: 60000, paceMs: 2 })
  await load.served(100)
  const first = await cluster.reload()
  const second = await cluster.reload()
  await load.served(50)
  const results = await load.stop()
  assert.strictEqual(first.ok, true, JSON.stringify(first))
  assert.strictEqual(second.ok, true, JSON.stringify(second))
  assert.strictEqual(first.replaced, 2)
  assert.strictEqual(second.generation, 3)
  assert.deepStrictEqual(results.failures, [])
  assert.strictEqual(results.failed, 0)
  assert.strictEqual(results.non2xx, 0)
  assert.ok(results.ok > 100, `load ran (${results.ok} requests)`)
  const stats = await cluster.stats()
  assert.strictEqual(stats.workers.length, 2)
  for (const worker of stats.workers) {
    assert.ok(!before.has(worker.pid), `pid ${worker.pid} was replaced`)
    assert.strictEqual(worker.generation, 3)
  }
  await cluster.stop()
})

test('a reload whose new code throws at boot is rolled back: old pids keep serving, zero failed requests', async () => {
  const flag = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cz-')), 'broken')
  const cluster = await startCluster(fixture, { env: env({ workers: 2 }, { CZ_BOOT_FAIL_FILE: flag }) })
  const before = new Set(cluster.workerPids)
  const load = startLoad({ port: cluster.port, connections: 6, durationMs: 60000, paceMs: 2 })
  await load.served(50)
  fs.writeFileSync(flag, 'deploy broken code')
  const result = await cluster.reload()
  await load.served(50)
  const results = await load.stop()
  assert.strictEqual(result.ok, false)
  assert.strictEqual(result.rolledBack, true)
  assert.match(result.reason, /boom at boot: new code is broken/)
  assert.strictEqual(results.failed + results.non2xx, 0, JSON.stringify(results.failures.slice(0, 3)))
  const servedBy = new Set(results.requests.slice(-50).map((r) => r.pid))
  for (const pid of servedBy) assert.ok(before.has(pid), 'only the old generation serves')
  const stats = await cluster.stats()
  assert.deepStrictEqual(new Set(stats.workers.map((w) => w.pid)), before)
  assert.strictEqual(stats.generation, 1)
  fs.rmSync(path.dirname(flag), { recursive: true, force: true })
  await cluster.stop()
})

test('a worker stuck in a busy loop is detected by missing heartbeats and replaced', async () => {
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, health: { heartbeatMs: 200, heartbeatTimeoutMs: 1500 } })
  })
  const stuck = (await cluster.get('/busy')).json.pid
  const exit = await cluster.waitEvent('worker:exit', (d) => d.pid === stuck)
  assert.strictEqual(exit.data.reason, 'hang')
  await cluster.waitEvent('worker:ready', (d) => d.id === exit.data.id && d.pid !== stuck)
  assert.match(cluster.output, /sent no heartbeat for \d+ ms/)
  const pids = new Set()
  // Fresh connections until both workers answered (the kernel picks the worker with 'balanced', the default on Linux).
  for (let i = 0; i < 40 && (i < 8 || pids.size < 2); i++) pids.add((await cluster.get('/')).json.pid)
  assert.strictEqual(pids.size, 2)
  assert.ok(!pids.has(stuck))
  await cluster.stop()
})

test('a primary held up longer than health.heartbeatTimeoutMs does not take its workers\' unread heartbeats for a hang', async () => {
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, health: { heartbeatMs: 200, heartbeatTimeoutMs: 1500 } })
  })
  const before = new Set(cluster.workerPids)
  // 4 s without reading a heartbeat: the workers beat on, their messages wait in the pipes.
  await cluster.command({ type: 'cz-test:block', ms: 4000 }, 'cz-test:blocked')
  // Past two more check rounds after the block: a wrong verdict would be out by now.
  await new Promise((resolve) => setTimeout(resolve, 2500))
  const stats = await cluster.stats()
  assert.deepStrictEqual(cluster.events.filter((e) => e.event === 'worker:exit'), [], 'no worker was killed')
  assert.doesNotMatch(cluster.output, /sent no heartbeat/)
  assert.deepStrictEqual(new Set(stats.workers.map((w) => w.pid)), before)
  await cluster.stop()
})

test('a worker whose memory grows past maxMemoryMB is recycled with zero failed requests', async () => {
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, health: { heartbeatMs: 200, maxMemoryMB: 200 } })
  })
  const load = startLoad({ port: cluster.port, connections: 4, durationMs: 60000, paceMs: 2 })
  await load.served(30)
  const grown = (await cluster.get('/grow?mb=256')).json.pid
  const exit = await cluster.waitEvent('worker:exit', (d) => d.pid === grown)
  assert.strictEqual(exit.data.reason, 'memory')
  assert.strictEqual(exit.data.code, 0, 'drained and exited by itself')
  await load.served(30)
  const results = await load.stop()
  assert.strictEqual(results.failed + results.non2xx, 0, JSON.stringify(results.failures.slice(0, 3)))
  const replacement = cluster.events.find((e) => e.event === 'worker:ready' && e.data.id === exit.data.id && e.data.pid !== grown)
  assert.ok(replacement, 'a replacement for the same slot became ready')
  await cluster.stop()
})

test('probes: /live, /ready, /stats and /metrics; /ready turns 503 as soon as shutdown starts', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, probes: { port: 0 }, health: { heartbeatMs: 100 }, shutdown: { timeoutMs: 5000 } }) })
  assert.ok(cluster.probesPort > 0)
  assert.strictEqual((await cluster.probe('/live')).status, 200)
  assert.strictEqual((await cluster.probe('/ready')).status, 200)
  await cluster.get('/')
  // Wait for a heartbeat that counted that request.
  const stats = await eventually(async () => {
    const body = (await cluster.probe('/stats')).json
    return body.workers.every((w) => w.heartbeat) && body.workers.some((w) => w.heartbeat.served > 0) && body
  })
  assert.strictEqual(stats.workers.length, 2)
  for (const worker of stats.workers) {
    assert.strictEqual(worker.state, 'ready')
    assert.strictEqual(worker.generation, 1)
    assert.ok(worker.heartbeat.rss > 0)
    assert.ok(typeof worker.heartbeat.eventLoopDelayP99Ms === 'number')
  }
  const metrics = await cluster.probe('/metrics')
  assert.strictEqual(metrics.status, 200)
  assertPrometheusText(metrics.body)
  assert.match(metrics.body, /^clusterize_workers\{state="ready"\} 2$/m)
  assert.match(metrics.body, /^clusterize_worker_rss_bytes\{worker="0",pid="\d+",generation="1"\} \d+/m)
  assert.match(metrics.body, /^clusterize_requests_total \d+/m)

  let slowDone = false
  const slow = cluster.get('/slow?ms=1500').finally(() => { slowDone = true })
  await cluster.waitInFlight(1)
  cluster.signal('SIGTERM')
  await eventually(async () => (await request(cluster.probesPort, '/ready')).status === 503, { intervalMs: 10 })
  assert.strictEqual(slowDone, false, '/ready said 503 while a request was still in flight')
  assert.strictEqual((await slow).status, 200)
  assert.strictEqual((await cluster.exit).code, 0)
})

test('SIGTERM in the middle of a reload: the reload stops, every worker (old and new) exits, the primary exits', async () => {
  const pidDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-pids-'))
  const cluster = await startCluster(fixture, { env: env({ workers: 2 }, { CZ_PID_DIR: pidDir, CZ_BOOT_DELAY_MS: '400' }) })
  const reloaded = cluster.reload().catch((err) => err)
  // The reload's first new worker has started booting.
  await eventually(() => fs.readdirSync(pidDir).length >= 3, { intervalMs: 10 })
  cluster.signal('SIGTERM')
  const { code } = await cluster.exit
  assert.strictEqual(code, 0)
  const pids = fs.readdirSync(pidDir).map(Number)
  assert.ok(pids.length >= 3, `the reload had started a new worker (${pids.length} pids)`)
  for (const pid of pids) assert.ok(await waitDead(pid), `worker ${pid} is gone`)
  // Either the primary exits before it answers, or it answers that the shutdown stopped the
  // reload: never a success, and never a rollback blamed on the new code.
  const answer = await reloaded
  if (!(answer instanceof Error)) {
    assert.strictEqual(answer.ok, false)
    assert.strictEqual(answer.reason, 'shutting down')
    assert.strictEqual(answer.rolledBack, false)
  }
  fs.rmSync(pidDir, { recursive: true, force: true })
})

/** Every line is a comment or `name{labels} value` per the text exposition format. */
function assertPrometheusText (text) {
  const sample = /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? -?(\d+(\.\d+)?(e[+-]?\d+)?|NaN|\+Inf|-Inf)$/
  const lines = text.split('\n').filter(Boolean)
  assert.ok(lines.length > 10)
  for (const line of lines) {
    if (line.startsWith('# HELP ') || line.startsWith('# TYPE ')) continue
    assert.match(line, sample)
  }
}
