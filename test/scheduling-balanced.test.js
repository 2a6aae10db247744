'use strict'

// scheduling: 'balanced' (lib/primary/balancer.js, lib/worker/balanced-listen.js):
// workers accept from the shared socket themselves and stop while they hold
// more than their share or their event loop is late.

const { test, after } = require('node:test')
const assert = require('node:assert')
const http = require('http')
const path = require('path')
const { startCluster, stopAll, request } = require('./helpers/cluster')
const { startLoad } = require('./helpers/load')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
// CZ_TEST_SCHEDULING runs these tests against another mode (to see which of them it fails).
const MODE = process.env.CZ_TEST_SCHEDULING || 'balanced'
const env = (options) => ({ CZ_TEST_OPTIONS: JSON.stringify(Object.assign({ scheduling: MODE }, options)) })
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

after(stopAll)

/** `n` requests at once on a keep-alive agent: n connections opened together. Resolves with each answer's pid. */
function openAtOnce (port, n, agent) {
  return Promise.all(Array.from({ length: n }, () => request(port, '/', { agent }).then((response) => response.json.pid)))
}

/** A keep-alive agent holding one connection to each of `count` different workers. */
async function connectionPerWorker (cluster, count) {
  const byPid = new Map()
  for (let i = 0; i < 200 && byPid.size < count; i++) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    const pid = (await request(cluster.port, '/', { agent })).json.pid
    if (byPid.has(pid)) agent.destroy()
    else byPid.set(pid, agent)
  }
  assert.strictEqual(byPid.size, count, 'reached every worker')
  return byPid
}

test("'balanced': serves, and a reload under keep-alive load loses no request", async () => {
  // A 1 s bake (default 5 s): what is tested is the hand-over of the listening socket, not the wait.
  const cluster = await startCluster(fixture, { env: env({ workers: 2, reload: { bakeMs: 1000 } }) })
  assert.strictEqual((await cluster.get('/')).status, 200)
  assert.strictEqual((await cluster.stats()).scheduling, MODE)
  const load = startLoad({ port: cluster.port, connections: 8, durationMs: 60000, paceMs: 2 })
  await sleep(300)
  const result = await cluster.reload()
  await sleep(300)
  const results = await load.stop()
  assert.strictEqual(result.ok, true, JSON.stringify(result))
  assert.ok(results.ok > 0)
  assert.strictEqual(results.failed + results.non2xx, 0, JSON.stringify(results.failures.slice(0, 3)))
  // The new generation accepts (the old one closed its copies, the socket stayed open).
  const { generation } = (await cluster.get('/')).json
  assert.strictEqual(generation, 2)
  await cluster.stop()
})

test("'balanced': 100 keep-alive connections opened at once spread evenly over 4 workers", async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 4 }) })
  const spreads = []
  for (let burst = 0; burst < 3; burst++) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 100 })
    try {
      const counts = new Map()
      for (const pid of await openAtOnce(cluster.port, 100, agent)) counts.set(pid, (counts.get(pid) || 0) + 1)
      spreads.push([...counts.values()].sort((a, b) => b - a).concat([0, 0, 0, 0]).slice(0, 4))
    } finally {
      agent.destroy()
    }
    // The next burst starts from no open connection.
    await eventually(async () => (await cluster.stats()).workers.every((w) => (w.balance ? w.balance.open : w.heartbeat.connections) === 0),
      { timeoutMs: 10000, what: 'every connection closed' })
  }
  const shown = spreads.map((s) => s.join('/')).join(', ')
  assert.ok(spreads.every((s) => s[3] > 0), `every worker got connections in every burst: ${shown}`)
  // The median burst: the goal is 1.3, 1.5 leaves room for a busy box (a starved
  // worker can lag one burst). 'none' gives medians of 5 to 8 (11/74/3/12...).
  const ratios = spreads.map((s) => s[0] / s[3]).sort((a, b) => a - b)
  assert.ok(ratios[1] <= 1.5, `median max/min within 1.5: ${shown}`)
  await cluster.stop()
})

test("'balanced': a worker whose event loop is late gets no new connection while the others serve", async () => {
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, health: { heartbeatMs: 300, heartbeatTimeoutMs: 20000, maxEventLoopDelayMs: 50 } })
  })
  // Busy 100 ms, free 100 ms, for 10 s: free half the time, so it would win some
  // accepts; every 300 ms heartbeat sees a 100 ms delay.
  const late = (await cluster.get('/hog?ms=10000&chunk=100&gap=100')).json.pid
  await eventually(async () => {
    const worker = (await cluster.stats()).workers.find((w) => w.pid === late)
    return worker.overloaded && (MODE !== 'balanced' || worker.balance.accepting === false)
  }, { timeoutMs: 5000, intervalMs: 25, what: () => 'the hogging worker marked late and not accepting\n' + cluster.output })
  const pids = []
  for (let i = 0; i < 20; i++) pids.push((await cluster.get('/')).json.pid)
  assert.ok(pids.every((pid) => pid !== late), `no new connection went to the late worker ${late}: ${pids}`)
  await cluster.stop()
})

test("'balanced': connections queued while every worker is blocked survive all of them being killed", async () => {
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, health: { heartbeatMs: 200, heartbeatTimeoutMs: 30000 }, restart: { backoffInitialMs: 10, backoffMaxMs: 50 } })
  })
  const agents = await connectionPerWorker(cluster, 2)
  const victims = [...agents.keys()]
  // Block both workers; nobody accepts, so new connections wait in the kernel's queue.
  const blocked = [...agents.values()].map((agent) => request(cluster.port, '/block?ms=5000', { agent }).catch((err) => err))
  await sleep(500)
  const queued = Array.from({ length: 10 }, () => request(cluster.port, '/', { timeoutMs: 30000 }).then((r) => r, (err) => err))
  await sleep(300)
  for (const pid of victims) process.kill(pid, 'SIGKILL')
  const answers = await Promise.all(queued)
  await Promise.all(blocked)
  for (const agent of agents.values()) agent.destroy()
  const failures = answers.filter((answer) => answer instanceof Error).map((err) => err.code || err.message)
  assert.deepStrictEqual(failures, [], 'every queued connection was answered')
  for (const answer of answers) {
    assert.strictEqual(answer.status, 200)
    assert.ok(!victims.includes(answer.json.pid), 'answered by a replacement')
  }
  await cluster.stop()
})

test("'balanced': a port in use fails at startup naming the port", async () => {
  const net = require('net')
  const taken = net.createServer()
  await new Promise((resolve) => taken.listen(0, '127.0.0.1', resolve))
  const { port } = taken.address()
  try {
    await assert.rejects(
      startCluster(fixture, { env: env({ workers: 1, port }) }),
      new RegExp(`port ${port} is already in use \\(EADDRINUSE\\)`))
  } finally {
    taken.close()
  }
})

test("'balanced' falls back to 'none' with a warning where Node cannot bind a socket without listening on it", () => {
  const net = require('net')
  const { resolveScheduling } = require('../lib/primary/scheduling')
  const saved = net._createServerHandle
  const warnings = []
  net._createServerHandle = undefined
  try {
    const resolved = resolveScheduling({ scheduling: 'balanced' }, { warn: (message) => warnings.push(message) })
    assert.deepStrictEqual(resolved, { mode: 'none', listenMode: 'cluster' })
    assert.match(warnings.join('\n'), /scheduling 'balanced' is not available: .* falling back to 'none'/)
  } finally {
    net._createServerHandle = saved
  }
})
