'use strict'

/**
 * handle.scale(n): workers are added and retired while the cluster serves,
 * with no failed request on keep-alive connections nor on new ones, and
 * /stats follows. Real cluster, real HTTP on loopback.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const http = require('http')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { startLoad } = require('./helpers/load')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const env = (options) => ({ CZ_TEST_OPTIONS: JSON.stringify(options) })

after(() => stopAll())

/** One request after another, each on a new connection, until stop(). */
function newConnectionLoad (port) {
  const results = { ok: 0, failures: [] }
  let stopped = false
  const done = (async () => {
    while (!stopped) {
      await new Promise((resolve) => {
        const req = http.get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
          res.resume()
          res.on('end', () => {
            if (res.statusCode === 200) results.ok++
            else results.failures.push(res.statusCode)
            resolve()
          })
        })
        req.setTimeout(15000, () => req.destroy(new Error('timed out')))
        req.on('error', (err) => {
          results.failures.push(err.code || err.message)
          resolve()
        })
      })
      await new Promise((resolve) => setTimeout(resolve, 2))
    }
    return results
  })()
  return { results, stop () { stopped = true; return done } }
}

function scale (cluster, count) {
  return cluster.command({ type: 'cz-test:scale', count }, 'cz-test:scaled', 90000)
}

async function probeStats (cluster) {
  return (await cluster.probe('/stats')).json
}

// CZ_TEST_SCHEDULING=balanced,sticky,reuseport runs the other modes too (they passed when this was written).
const SCHEDULING = (process.env.CZ_TEST_SCHEDULING || 'rr,none').split(',')

for (const scheduling of SCHEDULING) test(`scale up and down under keep-alive and new-connection load: zero failed requests, /stats shows the count (scheduling ${scheduling})`, async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, scheduling, probes: { port: 0 } }) })
  const keepAlive = startLoad({ port: cluster.port, connections: 4, durationMs: 120000, paceMs: 2 })
  const fresh = newConnectionLoad(cluster.port)
  try {
    await keepAlive.served(50)

    const up = await scale(cluster, 4)
    assert.strictEqual(up.error, undefined)
    assert.strictEqual(up.result.ok, true, up.result.reason)
    assert.strictEqual(up.result.from, 2)
    assert.strictEqual(up.result.ready, 4)
    let stats = await probeStats(cluster)
    assert.strictEqual(stats.scaling.workers, 4)
    assert.deepStrictEqual(stats.workers.filter((w) => w.state === 'ready').map((w) => w.id), [0, 1, 2, 3])
    // The new workers take their share of new connections.
    const added = new Set(stats.workers.filter((w) => w.id >= 2).map((w) => w.pid))
    await eventually(async () => {
      const answer = await cluster.get('/')
      return added.has(answer.json.pid)
    }, { timeoutMs: 30000, what: 'a request answered by an added worker' })

    const retiring = stats.workers.filter((w) => w.id >= 1).map((w) => w.pid)
    const down = await scale(cluster, 1)
    assert.strictEqual(down.result.ok, true, down.result.reason)
    assert.strictEqual(down.result.to, 1)
    stats = await probeStats(cluster)
    assert.strictEqual(stats.scaling.workers, 1)
    assert.deepStrictEqual(stats.workers.map((w) => w.id), [0])
    // Retired means exited after draining, not killed.
    const exits = cluster.events.filter((e) => e.event === 'worker:exit' && retiring.includes(e.data.pid))
    assert.strictEqual(exits.length, 3)
    for (const exit of exits) assert.strictEqual(exit.data.reason, 'scale-down')
    await keepAlive.served(50)
    // The dashboard's timeline tells both changes.
    await eventually(async () => {
      const history = (await cluster.probe('/dashboard/history')).json
      const scaled = history.events.filter((e) => e.type === 'scale-done').map((e) => [e.from, e.to, e.ok, e.why])
      return JSON.stringify(scaled) === JSON.stringify([[2, 4, true, 'requested'], [4, 1, true, 'requested']])
    }, { timeoutMs: 20000, what: 'the dashboard history to show both scalings' })
  } finally {
    await keepAlive.stop()
    await fresh.stop()
  }
  const loaded = keepAlive.results
  assert.strictEqual(loaded.failed + loaded.non2xx, 0, JSON.stringify(loaded.failures.slice(0, 5)))
  assert.ok(loaded.ok > 100)
  assert.deepStrictEqual(fresh.results.failures, [])
  assert.ok(fresh.results.ok > 20)
  assert.match(cluster.output, /scaling from 2 to 4 workers \(requested\)/)
  assert.match(cluster.output, /scaled to 1 workers \(requested\)/)
  await cluster.stop()
})

test('scale() refuses a count it cannot run, naming the range; a slot scaled away while its crashed worker waits for its backoff is not respawned', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, restart: { backoffInitialMs: 4000 } }) })
  try {
    for (const bad of [0, 1.5, 'three', 1025]) {
      const reply = await scale(cluster, bad)
      assert.match(reply.error, /scale: the worker count must be an integer from 1 to 1024/)
    }
    // A slot's first crash is respawned at once, its second after the backoff (2 to 4 s here).
    const first = (await cluster.stats()).workers.find((w) => w.id === 1)
    process.kill(first.pid, 'SIGKILL')
    let second
    await eventually(async () => {
      second = (await cluster.stats()).workers.find((w) => w.id === 1 && w.pid !== first.pid && w.state === 'ready')
      return Boolean(second)
    }, { timeoutMs: 30000, what: 'slot 1 respawned once' })
    process.kill(second.pid, 'SIGKILL')
    await cluster.waitOutput(/restarting worker 1 in \d+ ms/)
    const down = await scale(cluster, 1)
    assert.strictEqual(down.result.ok, true)
    // Past the backoff: the respawn timer fired and left the slot alone.
    await new Promise((resolve) => setTimeout(resolve, 5000))
    const stats = await cluster.stats()
    assert.deepStrictEqual(stats.workers.map((w) => w.id), [0])
    assert.strictEqual(stats.scaling.workers, 1)
    const up = await scale(cluster, 2)
    assert.strictEqual(up.result.ok, true, up.result.reason)
    assert.deepStrictEqual((await cluster.stats()).workers.map((w) => w.id), [0, 1])
  } finally {
    await cluster.stop()
  }
})

test('dynamic workers: a CPU-busy worker brings a second one, idleness retires it (short windows via options)', async () => {
  const { availableCpus } = require('../lib/cpus')
  const canAdd = availableCpus() >= 2
  const cluster = await startCluster(fixture, { env: env({ workers: { min: 1, max: 2, upAfterMs: 1500, downAfterMs: 3000 }, health: { heartbeatMs: 500 } }) })
  try {
    assert.strictEqual((await cluster.stats()).scaling.mode, 'dynamic')
    // The one worker's event loop is saturated for 8 s (in 300 ms chunks: it still beats).
    await cluster.get('/hog?ms=8000&chunk=300')
    if (!canAdd) {
      // One usable CPU: the cap holds the count, and the log says why.
      await cluster.waitOutput(/dynamic workers: not adding a worker: .*already at the cap \(1\)/)
      return
    }
    const up = await cluster.waitEvent('scale:done', (r) => r.to === 2, 30000)
    assert.deepStrictEqual([up.data.ok, up.data.from, up.data.why], [true, 1, 'load'])
    assert.match(cluster.output, /dynamic workers: adding a worker \(1 -> 2\): mean event-loop utilization [01]\.\d+ >= 0\.75 for 1500 ms/)
    const down = await cluster.waitEvent('scale:done', (r) => r.to === 1, 40000)
    assert.deepStrictEqual([down.data.ok, down.data.from, down.data.why], [true, 2, 'load'])
    assert.match(cluster.output, /dynamic workers: retiring a worker \(2 -> 1\): mean event-loop utilization 0\.\d+ <= 0\.25 for 3000 ms/)
    const stats = await cluster.stats()
    assert.strictEqual(stats.scaling.workers, 1)
    assert.deepStrictEqual(stats.workers.map((w) => w.id), [0])
  } finally {
    await cluster.stop()
  }
})

test('dynamic workers add none while the cgroup memory limit has no room for one more worker\'s RSS, and say so', async () => {
  const fs = require('fs')
  const os = require('os')
  // A cgroup v2 tree the primary reads instead of /sys/fs/cgroup: no CPU quota, 1 MiB of memory left.
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-scale-cgroup-'))
  fs.writeFileSync(path.join(root, 'cgroup.controllers'), 'cpu memory')
  fs.writeFileSync(path.join(root, 'cpu.max'), 'max 100000')
  fs.writeFileSync(path.join(root, 'memory.max'), String(512 * 1024 * 1024))
  fs.writeFileSync(path.join(root, 'memory.current'), String(511 * 1024 * 1024))
  const cluster = await startCluster(fixture, {
    env: Object.assign(env({ workers: { min: 1, max: 2, upAfterMs: 1000, downAfterMs: 600000 }, health: { heartbeatMs: 500 } }), { CLUSTERIZE_CGROUP_ROOT: root })
  })
  try {
    await cluster.get('/hog?ms=6000&chunk=300')
    await cluster.waitOutput(/dynamic workers: not adding a worker: mean event-loop utilization [01]\.\d+ >= 0\.75, but memory has no room for one more worker/)
    assert.strictEqual((await cluster.stats()).scaling.workers, 1)
    assert.ok(!/dynamic workers: adding a worker/.test(cluster.output), cluster.output)
  } finally {
    await cluster.stop()
    fs.rmSync(root, { recursive: true, force: true })
  }
})
