'use strict'

/**
 * The primary must never be the outage: a route that crashes its worker over
 * and over, code on disk that cannot stay up, a fork that fails, an app that
 * never becomes ready at first start, and a hang that starts just before a
 * reload commits. Real clusters, real signals, real HTTP on loopback.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { parse } = require('./helpers/prometheus')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const env = (options, extra) => Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options) }, extra)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-faults-'))

after(async () => {
  await stopAll()
  fs.rmSync(tmp, { recursive: true, force: true })
})

test('a route that crashes its worker, hit more often than restart.maxCrashes: each crash is restarted and counted, the breaker never trips, the service keeps serving', async () => {
  const stableAfterMs = 1000
  const cluster = await startCluster(fixture, {
    env: env({
      workers: 2,
      probes: { port: 0 },
      health: { heartbeatMs: 100 },
      restart: { backoffInitialMs: 10, maxCrashes: 2, crashWindowMs: 60000, stableAfterMs }
    })
  })
  const readyEvents = () => cluster.events.filter((e) => e.event === 'worker:ready').length
  const base = readyEvents()
  const hits = 4
  for (let i = 0; i < hits; i++) {
    // Every worker has been ready longer than stableAfterMs: the test saw it ready before this pause.
    await sleep(stableAfterMs + 300)
    assert.strictEqual((await cluster.get('/crash')).json.crashing, true)
    await cluster.waitFor(() => readyEvents() >= base + i + 1)
  }
  const exits = cluster.events.filter((e) => e.event === 'worker:exit')
  assert.strictEqual(exits.length, hits)
  assert.ok(exits.every((e) => e.data.reason === 'crash'), JSON.stringify(exits))
  assert.strictEqual(cluster.events.filter((e) => e.event === 'crashloop').length, 0, 'no crash loop')
  assert.strictEqual((await cluster.get('/')).status, 200)
  assert.strictEqual((await cluster.probe('/ready')).status, 200)
  assert.strictEqual((await cluster.probe('/live')).status, 200)
  const stats = (await cluster.probe('/stats')).json
  assert.deepStrictEqual(stats.failures, { request: hits, start: 0, fork: 0 })
  assert.strictEqual(stats.crashLooping, false)
  const metrics = parse((await cluster.probe('/metrics')).body)
  assert.strictEqual(metrics.get('clusterize_worker_failures_total{kind="request"}'), hits)
  assert.strictEqual(metrics.get('clusterize_worker_failures_total{kind="start"}'), 0)
  assert.strictEqual(metrics.get('clusterize_worker_exits_total{reason="crash"}'), hits)
  assert.strictEqual(cluster.child.exitCode, null, 'the primary runs')
  assert.match(cluster.output, /worker \d crashed: exited unexpectedly with code 3/)
  await cluster.stop()
})

test('code on disk that cannot stay up opens the breaker: the primary keeps running and retrying, /ready answers 503; once the code is fixed a retry stays up and it closes', async () => {
  const flag = path.join(tmp, 'crash-soon')
  const cluster = await startCluster(fixture, {
    env: env({
      workers: 1,
      probes: { port: 0 },
      health: { heartbeatMs: 100 },
      restart: { backoffInitialMs: 10, backoffMaxMs: 300, maxCrashes: 3, crashWindowMs: 60000, stableAfterMs: 1500 }
    }, { CZ_CRASH_AFTER_READY_FILE: flag })
  })
  // From now on every new worker dies 300 ms after it boots; the one serving is brought down by a request.
  fs.writeFileSync(flag, '300')
  await cluster.get('/crash')
  await cluster.waitEvent('crashloop')
  assert.match(cluster.output, /crash loop: 3 failures of generation 1 within 60000 ms; the breaker is open/)
  // Retried at the capped backoff, never given up: more forks come and fail.
  await eventually(() => cluster.events.filter((e) => e.event === 'worker:exit').length >= 6, { timeoutMs: 30000, what: () => 'retries\n' + cluster.output })
  assert.strictEqual(cluster.child.exitCode, null, 'the primary runs')
  assert.match(cluster.output, /crash loop: retrying worker 0 in \d+ ms \(the breaker is open; \/ready answers 503\)/)
  assert.strictEqual((await cluster.probe('/ready')).status, 503)
  assert.strictEqual((await cluster.probe('/live')).status, 200, 'the primary works: nothing for an orchestrator to restart')
  const open = (await cluster.probe('/stats')).json
  assert.strictEqual(open.crashLooping, true)
  assert.ok(open.failures.start >= 3, JSON.stringify(open.failures))

  fs.rmSync(flag)
  await eventually(async () => (await cluster.probe('/ready')).status === 200, { timeoutMs: 30000, what: () => 'ready again\n' + cluster.output })
  assert.match(cluster.output, /crash loop over: worker 0 \(generation 1\) stayed up \d+ ms/)
  assert.strictEqual((await cluster.get('/')).status, 200)
  assert.strictEqual((await cluster.probe('/stats')).json.crashLooping, false)
  assert.strictEqual(cluster.events.filter((e) => e.event === 'crashloop').length, 1)
  await cluster.stop()
})

test('a fork that fails with EMFILE is a failed start: logged, counted, /ready reflects the missing worker, retried once descriptors are back; a stop during it finishes', async () => {
  const cluster = await startCluster(fixture, {
    // A low descriptor limit: the primary takes the rest of them quickly.
    fdLimit: 256,
    env: env({
      workers: 2,
      probes: { port: 0 },
      health: { heartbeatMs: 100 },
      restart: { backoffInitialMs: 100, backoffMaxMs: 400 }
    })
  })
  const hoarded = await cluster.command({ type: 'cz-test:hoard-fds' }, 'cz-test:hoarded')
  assert.ok(hoarded.count > 0)
  const victim = (await cluster.stats()).workers.find((w) => w.id === 1).pid
  process.kill(victim, 'SIGKILL')
  const failing = await eventually(async () => {
    const stats = await cluster.stats()
    return stats.failures && stats.failures.fork >= 2 && stats
  }, { timeoutMs: 20000, what: () => 'failed forks\n' + cluster.output })
  assert.deepStrictEqual(failing.cannotFork, [1])
  assert.strictEqual(failing.ready, false, '/ready answers 503 while a slot cannot be filled')
  assert.ok(failing.workers.every((w) => Number.isInteger(w.pid)), `no worker without a process: ${JSON.stringify(failing.workers.map((w) => [w.id, w.pid, w.state]))}`)
  assert.match(cluster.output, /could not fork worker 1: spawn .*EMFILE \(the primary is out of file descriptors/)

  await cluster.command({ type: 'cz-test:release-fds' }, 'cz-test:released')
  const recovered = await eventually(async () => {
    const stats = await cluster.stats()
    return stats.ready && stats.workers.filter((w) => w.state === 'ready').length === 2 && stats
  }, { timeoutMs: 20000, what: () => 'the slot filled again\n' + cluster.output })
  assert.deepStrictEqual(recovered.cannotFork, [])
  assert.strictEqual((await cluster.probe('/ready')).status, 200)
  assert.strictEqual((await cluster.get('/')).status, 200)

  // Again, and this time stop while the fork fails: the shutdown finishes.
  await cluster.command({ type: 'cz-test:hoard-fds' }, 'cz-test:hoarded')
  const before = (await cluster.stats()).failures.fork
  process.kill((await cluster.stats()).workers.find((w) => w.id === 0).pid, 'SIGKILL')
  await eventually(async () => (await cluster.stats()).failures.fork > before, { timeoutMs: 20000, what: () => 'a failed fork\n' + cluster.output })
  cluster.signal('SIGTERM')
  const { code } = await cluster.exit
  assert.strictEqual(code, 0, cluster.output)
  await cluster.stop()
})

test('an app that never becomes ready at first start: a clear message at reload.readyTimeoutMs, a failed start retried, then it starts', async () => {
  const hold = path.join(tmp, 'hold-boot')
  fs.writeFileSync(hold, '')
  const cluster = await startCluster(fixture, {
    waitReady: false,
    env: env({ workers: 1, reload: { readyTimeoutMs: 4000 }, restart: { backoffInitialMs: 10, maxCrashes: 100 } }, { CZ_BOOT_HOLD_FILE: hold })
  })
  await cluster.waitOutput(/worker 0 was not ready within 4000 ms \(reload\.readyTimeoutMs\): killing it/)
  const exit = await cluster.waitEvent('worker:exit')
  assert.strictEqual(exit.data.reason, 'boot-failure')
  assert.match(cluster.output, /worker 0 failed to boot: it was not ready within 4000 ms/)
  fs.rmSync(hold)
  const ready = await cluster.waitEvent('worker:ready')
  assert.notStrictEqual(ready.data.pid, exit.data.pid, 'a new worker, started after the failed one')
  await cluster.stop()
})

test('a hang that starts in the last seconds of the final bake is rolled back: the commit needs an answer from every new worker', async () => {
  const flag = path.join(tmp, 'hang-late')
  const cluster = await startCluster(fixture, {
    env: env({ workers: 1, health: { heartbeatMs: 100 }, reload: { bakeMs: 4000 } }, { CZ_HANG_AFTER_READY_FILE: flag })
  })
  const old = (await cluster.get('/')).json
  // The new worker hangs 6.5 s after it boots: after the canary's bake, and less than
  // reload.heartbeatTimeoutMs (3 s) before the final bake ends 8 s after it was ready.
  fs.writeFileSync(flag, '6500')
  const result = await cluster.reload(90000)
  assert.strictEqual(result.ok, false, JSON.stringify(result))
  assert.strictEqual(result.rolledBack, true, JSON.stringify(result))
  assert.match(result.reason, /it hangs/)
  assert.doesNotMatch(cluster.output, /reload done/)
  const now = (await cluster.get('/')).json
  assert.strictEqual(now.pid, old.pid, 'the old worker serves again')
  assert.strictEqual(now.generation, 1)
  await cluster.stop()
})
