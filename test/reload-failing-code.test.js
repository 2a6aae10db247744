'use strict'

/**
 * Reloads into code that fails only after it is ready and past the point a
 * bake window watching exits alone would catch: it hangs, it leaks fast, it
 * crashes just after its bake. Each must roll back with the old workers
 * serving and the primary alive; and a breaker opened by hang kills says
 * what the failure was. Real clusters, real signals, HTTP on loopback.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startCluster, stopAll, waitDead } = require('./helpers/cluster')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const env = (options, extra) => Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options) }, extra)
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-reload-failing-'))

after(async () => {
  await stopAll()
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** The old workers serve, the primary runs, no crash loop: the service is up. */
async function assertOldCodeServes (cluster, before) {
  const stats = await cluster.stats()
  assert.deepStrictEqual(new Set(stats.workers.map((w) => w.pid)), before, 'the old workers serve')
  assert.strictEqual(stats.generation, 1)
  assert.strictEqual(stats.crashLooping, false)
  for (let i = 0; i < 4; i++) {
    const response = await cluster.get('/')
    assert.strictEqual(response.status, 200)
    assert.ok(before.has(response.json.pid), `answered by an old worker (pid ${response.json.pid})`)
  }
  assert.strictEqual(cluster.child.exitCode, null, 'the primary is still running')
  assert.strictEqual(cluster.events.filter((e) => e.event === 'crashloop').length, 0, 'no crash loop')
}

test('a reload into code that hangs (for(;;){}) 1 s after boot is rolled back: old workers serve, the primary lives', async () => {
  const flag = path.join(tmp, 'hang')
  // Default health and reload options: the hang timeout (10 s) is longer than the bake (5 s).
  const cluster = await startCluster(fixture, { env: env({ workers: 2 }, { CZ_HANG_AFTER_READY_FILE: flag }) })
  const before = new Set(cluster.workerPids)
  fs.writeFileSync(flag, '1000')
  const result = await cluster.reload()
  assert.strictEqual(result.ok, false, JSON.stringify(result))
  assert.strictEqual(result.rolledBack, true, JSON.stringify(result))
  assert.strictEqual(result.replaced, 0)
  assert.match(result.reason, /generation 2\) sent no heartbeat for \d+ ms/)
  fs.rmSync(flag)
  await assertOldCodeServes(cluster, before)
  for (const pid of cluster.workerPids) {
    if (!before.has(pid)) assert.ok(await waitDead(pid), `the hung new worker ${pid} was killed`)
  }
  // The same deploy fixed: the reload goes through.
  const fixed = await cluster.reload()
  assert.strictEqual(fixed.ok, true, JSON.stringify(fixed))
  await cluster.stop()
})

test('a reload into code whose workers crash just after the canary\'s bake rolls back every slot it replaced', async () => {
  const flag = path.join(tmp, 'crash-after-bake')
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, reload: { bakeMs: 1500 }, restart: { backoffInitialMs: 10, maxCrashes: 3 } }, { CZ_CRASH_AFTER_READY_FILE: flag })
  })
  const before = new Set(cluster.workerPids)
  // The canary bakes 1.5 s and then dies 300 ms later, while or after the other slot is replaced.
  fs.writeFileSync(flag, '1800')
  const result = await cluster.reload()
  assert.strictEqual(result.ok, false, JSON.stringify(result))
  assert.strictEqual(result.rolledBack, true, JSON.stringify(result))
  assert.strictEqual(result.replaced, 0)
  assert.match(result.reason, /generation 2\) exited with code \d+/)
  fs.rmSync(flag)
  await assertOldCodeServes(cluster, before)
  await cluster.stop()
})

test('a reload into code leaking 70 MB/s on a 256 MB heap rolls back before V8 aborts; no worker crashes, the primary lives', async () => {
  const flag = path.join(tmp, 'leak')
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2 }, { CZ_LEAK_FILE: flag, NODE_OPTIONS: '--max-old-space-size=256' })
  })
  const before = new Set(cluster.workerPids)
  fs.writeFileSync(flag, '70')
  const result = await cluster.reload()
  assert.strictEqual(result.ok, false, JSON.stringify(result))
  assert.strictEqual(result.rolledBack, true, JSON.stringify(result))
  assert.match(result.reason, /generation 2\) heap (at|grows)/)
  fs.rmSync(flag)
  const crashes = cluster.events.filter((e) => e.event === 'worker:exit' && e.data.reason === 'crash')
  assert.deepStrictEqual(crashes, [], 'no worker died by itself (V8 out of heap is SIGABRT)')
  await assertOldCodeServes(cluster, before)
  await cluster.stop()
})

test('a primary held up longer than reload.heartbeatTimeoutMs while a healthy canary bakes does not take that for a hang', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 1, reload: { bakeMs: 3000 } }) })
  const reloaded = cluster.reload()
  await cluster.waitEvent('worker:ready', (d) => d.generation === 2)
  // 4 s without reading a heartbeat (reload.heartbeatTimeoutMs is 3 s): they wait in the pipe.
  await cluster.command({ type: 'cz-test:block', ms: 4000 }, 'cz-test:blocked')
  const result = await reloaded
  assert.strictEqual(result.ok, true, JSON.stringify(result))
  await cluster.stop()
})

test('the crash-loop breaker opened by hang kills names the failure (not "last failure: null"); the primary keeps retrying', async () => {
  const flag = path.join(tmp, 'hang-always')
  fs.writeFileSync(flag, '300')
  const cluster = await startCluster(fixture, {
    waitReady: false,
    env: env({ workers: 1, health: { heartbeatMs: 100, heartbeatTimeoutMs: 600 }, restart: { backoffInitialMs: 10, backoffMaxMs: 50, maxCrashes: 2 } }, { CZ_HANG_AFTER_READY_FILE: flag })
  })
  await cluster.waitOutput(/crash loop: 2 failures of generation 1 .*last failure: sent no heartbeat for \d+ ms/)
  assert.doesNotMatch(cluster.output, /last failure: null/i)
  // A worker was ready once: the breaker does not end the primary, it retries.
  await cluster.waitOutput(/crash loop: retrying worker 0 in \d+ ms/)
  assert.strictEqual(cluster.child.exitCode, null, 'the primary runs')
  await cluster.stop()
})
