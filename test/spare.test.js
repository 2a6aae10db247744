'use strict'

/**
 * Warm spares (`spare: 1`): a ready worker in no slot takes no traffic (with
 * 'rr' and with 'none', where it must not even listen), takes a crashed
 * worker's slot at once (its HTTP warm-up never reaches the app), and is
 * replaced behind it; it also takes the slot of a worker recycled for its
 * memory; after a reload the spare runs the new generation.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { startLoad } = require('./helpers/load')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const env = (options) => ({ CZ_TEST_OPTIONS: JSON.stringify(options) })

after(stopAll)

async function spareOf (cluster) {
  let spare = null
  await eventually(async () => {
    spare = (await cluster.stats()).workers.find((w) => w.state === 'spare' && w.heartbeatAgeMs !== null)
    return Boolean(spare)
  })
  return spare
}

for (const scheduling of ['rr', 'none', 'balanced']) {
  test(`'${scheduling}': the spare takes no traffic, takes a killed worker's slot, and a new spare is forked`, async () => {
    const cluster = await startCluster(fixture, { env: env({ workers: 2, spare: 1, scheduling, restart: { backoffInitialMs: 5000 } }) })
    const spare = await spareOf(cluster)
    assert.strictEqual(spare.id, -1)
    const servedBefore = new Set()
    for (let i = 0; i < 30; i++) servedBefore.add((await cluster.get('/')).json.pid)
    assert.ok(!servedBefore.has(spare.pid), 'the spare served nothing')

    const victim = (await cluster.stats()).workers.find((w) => w.id === 0)
    process.kill(victim.pid, 'SIGKILL')
    const promoted = await cluster.waitEvent('worker:ready', (d) => d.pid === spare.pid && d.id === 0)
    assert.strictEqual(promoted.data.state, 'ready')
    let firstServed = null
    await eventually(async () => {
      const answer = (await cluster.get('/')).json
      if (answer.pid === spare.pid) firstServed = answer
      return firstServed !== null
    }, { timeoutMs: 20000, intervalMs: 20 })
    assert.strictEqual(firstServed.requests, 1, "the spare's HTTP warm-up did not reach the app")
    let self = null
    await eventually(async () => {
      self = (await cluster.get('/bus-self')).json
      return self.pid === spare.pid
    }, { timeoutMs: 20000, intervalMs: 20 })
    assert.strictEqual(self.from, 0, "the promoted spare's bus messages name its slot, not -1")
    assert.ok(cluster.output.includes('worker 0 replaced by a warm spare'))
    const next = await spareOf(cluster)
    assert.notStrictEqual(next.pid, spare.pid, 'a new spare was forked')
    const stats = await cluster.stats()
    assert.deepStrictEqual(stats.workers.filter((w) => w.state === 'ready').map((w) => w.id).sort(), [0, 1])
    assert.strictEqual(stats.workers.find((w) => w.id === 0).restarts, 1)
    await cluster.stop()
  })
}

test('after a reload the spare runs the new generation', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, spare: 1, reload: { bakeMs: 200 } }) })
  const before = await spareOf(cluster)
  assert.strictEqual(before.generation, 1)
  const result = await cluster.reload()
  assert.strictEqual(result.ok, true, JSON.stringify(result))
  await eventually(async () => {
    const spares = (await cluster.stats()).workers.filter((w) => w.state === 'spare')
    return spares.length === 1 && spares[0].generation === 2 && spares[0].heartbeatAgeMs !== null
  })
  await cluster.stop()
})

test('a worker recycled for its memory hands its slot to the spare: no fork on the way, zero failed requests, a new spare behind it', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, spare: 1, health: { heartbeatMs: 200, maxMemoryMB: 200 } }) })
  const spare = await spareOf(cluster)
  const load = startLoad({ port: cluster.port, connections: 4, durationMs: 60000, paceMs: 2 })
  await load.served(30)
  const grown = (await cluster.get('/grow?mb=256')).json.pid
  const slot = (await cluster.stats()).workers.find((w) => w.pid === grown).id
  const promoted = await cluster.waitEvent('worker:ready', (d) => d.pid === spare.pid && d.id === slot)
  const exit = await cluster.waitEvent('worker:exit', (d) => d.pid === grown)
  assert.strictEqual(exit.data.reason, 'memory')
  assert.strictEqual(exit.data.code, 0, 'drained and exited by itself')
  assert.strictEqual(promoted.data.state, 'ready')
  assert.ok(cluster.output.includes(`worker ${slot} replaced by a warm spare (recycled: memory)`), cluster.output)
  await eventually(async () => (await cluster.get('/')).json.pid === spare.pid, { timeoutMs: 20000, intervalMs: 20 })
  await load.served(30)
  const results = await load.stop()
  assert.strictEqual(results.failed + results.non2xx, 0, JSON.stringify(results.failures.slice(0, 3)))
  const forkedForSlot = cluster.events.filter((e) => e.event === 'worker:ready' && e.data.id === slot && e.data.pid !== spare.pid && e.data.pid !== grown)
  assert.deepStrictEqual(forkedForSlot, [], 'the slot took the spare, not a new fork')
  const next = await spareOf(cluster)
  assert.notStrictEqual(next.pid, spare.pid, 'a new spare was forked')
  assert.strictEqual((await cluster.stats()).workers.find((w) => w.id === slot).restarts, 0, 'a recycle is not counted as a restart')
  await cluster.stop()
})
