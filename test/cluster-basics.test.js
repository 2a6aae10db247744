'use strict'

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { startCluster, stopAll, waitDead } = require('./helpers/cluster')
const { startLoad } = require('./helpers/load')
const { eventually } = require('./helpers/wait')
const { defaultScheduling } = require('../lib/primary/scheduling')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const quiet = { restart: { backoffInitialMs: 50, backoffMaxMs: 200, maxCrashes: 5, crashWindowMs: 60000 } }
const env = (options, extra) => Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options) }, extra)

after(stopAll)

/** `count` requests on fresh connections, and on until two pids answered (at most 5 x count; the kernel picks the worker with 'balanced'). */
async function pidsSeen (cluster, count) {
  const pids = new Set()
  for (let i = 0; i < count * 5 && (i < count || pids.size < 2); i++) pids.add((await cluster.get('/')).json.pid)
  return pids
}

test('2 workers answer from 2 different pids, none of them the primary (no scheduling option: the default mode for this platform)', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2 }) })
  assert.strictEqual((await cluster.stats()).scheduling, defaultScheduling().mode)
  const pids = await pidsSeen(cluster, 12)
  assert.strictEqual(pids.size, 2)
  assert.ok(!pids.has(cluster.pid))
  const slots = new Set()
  for (let i = 0; i < 6; i++) slots.add((await cluster.get('/')).json.worker)
  assert.deepStrictEqual([...slots].sort(), [0, 1])
  const { code } = await cluster.stop()
  assert.strictEqual(code, 0)
})

test('workers: 0 serves every request from the one process', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 0 }) })
  const pids = await pidsSeen(cluster, 6)
  assert.deepStrictEqual([...pids], [cluster.pid])
  const { code } = await cluster.stop()
  assert.strictEqual(code, 0)
})

test('kill -9 of a worker under traffic: same slot comes back, no request after it is ready fails', async () => {
  const cluster = await startCluster(fixture, { env: env(Object.assign({ workers: 2 }, quiet)) })
  const load = startLoad({ port: cluster.port, connections: 6, durationMs: 4000 })
  await load.served(30)
  const victim = cluster.events.find((e) => e.event === 'worker:ready' && e.data.id === 1).data
  process.kill(victim.pid, 'SIGKILL')
  const exit = await cluster.waitEvent('worker:exit', (d) => d.pid === victim.pid)
  assert.strictEqual(exit.data.id, 1)
  assert.strictEqual(exit.data.signal, 'SIGKILL')
  assert.strictEqual(exit.data.reason, 'crash')
  const replacement = await cluster.waitEvent('worker:ready', (d) => d.id === 1 && d.pid !== victim.pid)
  const readyAt = Date.now()
  const results = await load.done
  const lateFailures = results.failures.filter((f) => f.startedAt > readyAt)
  assert.deepStrictEqual(lateFailures, [])
  assert.ok(results.ok > 0)
  // Fresh connections until the replacement answered (the kernel picks the worker with 'balanced', the default on Linux).
  const after = new Set()
  for (let i = 0; i < 40 && (i < 10 || !after.has(replacement.data.pid)); i++) after.add((await cluster.get('/')).json.pid)
  assert.ok(after.has(replacement.data.pid), 'the replacement serves requests')
  assert.ok(!after.has(victim.pid))
  await cluster.stop()
})

test('a worker that throws at boot every time trips the crash-loop breaker; the primary exits non-zero naming the cause', async () => {
  const cluster = await startCluster(fixture, {
    env: env({ workers: 1, restart: { backoffInitialMs: 10, backoffMaxMs: 50, maxCrashes: 3, crashWindowMs: 60000 } }, { CZ_BOOT_FAIL: '1' }),
    waitReady: false
  })
  const { code } = await cluster.exit
  assert.notStrictEqual(code, 0)
  const exits = cluster.events.filter((e) => e.event === 'worker:exit')
  assert.strictEqual(exits.length, 3, 'stops forking after maxCrashes')
  assert.ok(exits.every((e) => e.data.reason === 'boot-failure'))
  const loop = cluster.events.find((e) => e.event === 'crashloop')
  assert.ok(loop, 'crashloop event emitted')
  assert.match(loop.data.lastError, /boom at boot: database unreachable/)
  assert.match(cluster.output, /failed to boot: boom at boot/)
  assert.match(cluster.output, /crash loop/)
  for (const pid of cluster.workerPids) assert.ok(await waitDead(pid), `worker ${pid} is gone`)
})

test('SIGTERM with a slow request in flight: it completes with 200, new connections are refused, exit 0, no child left', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, health: { heartbeatMs: 100 } }) })
  let slowDone = false
  const slow = cluster.get('/slow?ms=2000').finally(() => { slowDone = true })
  await cluster.waitInFlight(1)
  cluster.signal('SIGTERM')
  await eventually(() => cluster.get('/').then(() => false, (err) => err.code === 'ECONNREFUSED'), { intervalMs: 20 })
  assert.strictEqual(slowDone, false, 'refused while the slow request is still being answered')
  const response = await slow
  assert.strictEqual(response.status, 200)
  assert.strictEqual(response.json.slow, true)
  assert.strictEqual(response.headers.connection, 'close')
  const { code } = await cluster.exit
  assert.strictEqual(code, 0)
  for (const pid of cluster.workerPids) assert.ok(await waitDead(pid), `worker ${pid} is gone`)
})

test('a second signal forces an immediate exit', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 1, health: { heartbeatMs: 100 } }) })
  const slow = cluster.get('/slow?ms=10000').catch((err) => err)
  await cluster.waitInFlight(1)
  cluster.signal('SIGTERM')
  await cluster.waitOutput(/shutting down/)
  cluster.signal('SIGTERM')
  const { code } = await cluster.exit
  assert.strictEqual(code, 1)
  assert.ok(await slow instanceof Error)
  for (const pid of cluster.workerPids) assert.ok(await waitDead(pid), `worker ${pid} is gone`)
})

test('shutdown deadline force-kills stragglers and the exit code says so', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 1, health: { heartbeatMs: 100 }, shutdown: { timeoutMs: 300 } }) })
  const slow = cluster.get('/slow?ms=5000').catch((err) => err)
  await cluster.waitInFlight(1)
  cluster.signal('SIGTERM')
  const { code } = await cluster.exit
  assert.strictEqual(code, 1)
  assert.ok(await slow instanceof Error)
  assert.match(cluster.output, /forced|killing/)
})
