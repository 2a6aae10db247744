'use strict'

/**
 * Request bodies that arrive slower than slowBody.minBytesPerSecond: a
 * bounded flood of POSTs to an express.json() route, each sending one body
 * byte a second, is answered 408 and closed, in every scheduling mode, while
 * normal clients on the same workers keep being served.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const net = require('net')
const path = require('path')
const { startCluster, stopAll, request } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { reusePortSupport } = require('../lib/primary/scheduling')
const { resolveConfig } = require('../lib/config')

const fixture = path.join(__dirname, 'fixtures/slow-body-cluster.js')

after(stopAll)

/**
 * `count` POSTs that announce a 1000-byte JSON body and send one byte of it a second
 * (at most 60 bytes: they stop by themselves). Tracks what the server answers and when it closes.
 * `reconnects`: each one closed by the server opens a new one, this many times at most.
 */
async function slowPosts (port, count, reconnects = 0) {
  const clients = []
  let stopped = false
  function open (left, onConnected) {
    const socket = net.connect(port, '127.0.0.1')
    const client = { socket, closed: false, data: '', sent: 0, timer: null }
    clients.push(client)
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => { client.data += chunk })
    socket.on('error', () => {})
    socket.on('close', () => {
      client.closed = true
      clearInterval(client.timer)
      onConnected()
      if (left > 0 && !stopped) open(left - 1, () => {})
    })
    socket.on('connect', () => {
      socket.write('POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{')
      client.timer = setInterval(() => {
        if (client.sent++ >= 60 || socket.destroyed) return clearInterval(client.timer)
        socket.write(' ')
      }, 1000)
      onConnected()
    })
  }
  await Promise.all(Array.from({ length: count }, () => new Promise((resolve) => open(reconnects, resolve))))
  return {
    clients,
    closed: () => clients.filter((c) => c.closed).length,
    destroy: () => {
      stopped = true
      for (const c of clients) { clearInterval(c.timer); c.socket.destroy() }
    }
  }
}

/**
 * `total` normal requests, `concurrency` at a time, half GET /, half POST /echo.
 * @returns {Promise<{ ok: number, failures: string[] }>} how many were answered 200, and what the others got
 */
async function normalClients (port, total, concurrency, localAddress) {
  let next = 0
  let ok = 0
  const failures = []
  async function one () {
    while (next < total) {
      const i = next++
      const res = i % 2 === 0
        ? await request(port, '/', { localAddress }).catch((err) => err)
        : await request(port, '/echo', { method: 'POST', localAddress, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ i }) }).catch((err) => err)
      if (res.status === 200 && (i % 2 === 0 || (res.json && res.json.got.i === i))) ok++
      else failures.push(`${i % 2 === 0 ? 'GET' : 'POST'}: ${res.status || res.code || res.message}`)
    }
  }
  await Promise.all(Array.from({ length: concurrency }, one))
  return { ok, failures }
}

const MODES = [
  ['rr', {}],
  ['balanced', { scheduling: 'balanced' }],
  ['reuseport', { scheduling: 'reuseport' }],
  ['sticky', { scheduling: 'sticky' }]
]

for (const [name, options] of MODES) {
  const skip = name === 'reuseport' && !reusePortSupport().supported ? `reuseport needs Node >= 22.12 on Linux (${process.versions.node})` : false
  test(`'${name}': 40 POSTs sending their body a byte a second get 408 and are closed; normal clients are all served meanwhile`, { skip }, async () => {
    const cluster = await startCluster(fixture, {
      env: { CZ_TEST_OPTIONS: JSON.stringify(Object.assign({ workers: 2, slowBody: { graceMs: 2000 }, health: { heartbeatMs: 200 } }, options)) }
    })
    const slow = await slowPosts(cluster.port, 40)
    try {
      const { ok, failures } = await normalClients(cluster.port, 200, 4)
      assert.ok(ok >= 190, `at least 95% of normal requests answered: ${ok} of 200 (${failures.join(', ')})`)
      await eventually(() => slow.closed() === 40, {
        timeoutMs: 30000,
        what: () => `every slow POST closed by the server (${slow.closed()} of 40 were)\n--- cluster output ---\n${cluster.output}`
      })
      assert.ok(slow.clients.every((c) => c.sent < 60), 'closed by the server, not by running out of bytes to send')
      assert.ok(slow.clients.some((c) => /^HTTP\/1\.1 408 /.test(c.data)), 'answered Request Timeout')
      const stats = await eventually(async () => {
        const s = await cluster.stats()
        return s.workers.reduce((sum, w) => sum + ((w.heartbeat && w.heartbeat.slowBodyShed) || 0), 0) >= 40 ? s : null
      }, { timeoutMs: 20000, what: () => `slowBodyShed in the heartbeats\n--- cluster output ---\n${cluster.output}` })
      assert.deepStrictEqual(cluster.events.filter((e) => e.event === 'worker:exit'), [], 'no worker exited')
      assert.ok(stats.workers.length === 2)
      assert.match(cluster.output, /a request body arrived slower than 240 bytes\/s: answering 408/)
    } finally {
      slow.destroy()
      await cluster.stop()
    }
  })
}

test('past half of maxIdleConnections slow bodies, the oldest below the rate are closed at once, before their grace ends', async () => {
  // A grace far longer than the test: only the bound can close them.
  const cluster = await startCluster(fixture, {
    env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, maxIdleConnections: 40, slowBody: { graceMs: 3600000 } }) }
  })
  const slow = await slowPosts(cluster.port, 60)
  try {
    // At most 20 (half of 40) are held: the 40 oldest go.
    await eventually(() => slow.closed() >= 40, {
      timeoutMs: 30000,
      what: () => `slow POSTs beyond the bound closed (${slow.closed()} of 60 were)\n--- cluster output ---\n${cluster.output}`
    })
    assert.strictEqual((await request(cluster.port, '/echo', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"a":1}' })).json.got.a, 1)
    assert.ok(slow.clients.slice(-10).some((c) => !c.closed), 'some of the newest are still held')
  } finally {
    slow.destroy()
    await cluster.stop()
  }
})

test("under ulimit -n 256, 600 slow POSTs reconnecting (up to 3 times each) on 2 workers: at least 95% of normal clients (another address) are served and no worker runs out of descriptors", async () => {
  const cluster = await startCluster(fixture, {
    fdLimit: 256,
    env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, health: { heartbeatMs: 200 } }) }
  })
  const slow = await slowPosts(cluster.port, 600, 3)
  try {
    // From another address, as real clients are: a flood that reconnects as fast as it is shed
    // fills the primary's hand-off share for its own address (test/primary-connections.test.js).
    const { ok, failures } = await normalClients(cluster.port, 200, 4, '127.0.0.2')
    const stats = await cluster.stats()
    assert.ok(ok >= 190, `at least 95% of normal requests answered: ${ok} of 200 (${failures.join(', ')}); ${JSON.stringify(stats.connections)}\n--- cluster output ---\n${cluster.output}`)
    for (const worker of stats.workers) assert.strictEqual(worker.heartbeat.fdExhausted, false, `worker ${worker.id} has descriptors left`)
    assert.deepStrictEqual(cluster.events.filter((e) => e.event === 'worker:exit'), [], 'no worker exited')
  } finally {
    slow.destroy()
    await cluster.stop()
  }
})

test('slowBody options are checked at startup', () => {
  for (const [options, option] of [
    [{ slowBody: { minBytesPerSecond: -1 } }, 'slowBody.minBytesPerSecond'],
    [{ slowBody: { graceMs: 'soon' } }, 'slowBody.graceMs'],
    [{ slowBody: { minRate: 5 } }, 'slowBody.minRate'],
    [{ slowBody: 100 }, 'slowBody']
  ]) {
    assert.throws(() => resolveConfig(options, {}), (err) => err.name === 'ClusterizeOptionError' && err.option === option, option)
  }
  assert.deepStrictEqual(resolveConfig({}, {}).slowBody, { minBytesPerSecond: 240, graceMs: 5000 })
  assert.strictEqual(resolveConfig({ slowBody: { minBytesPerSecond: 0 } }, {}).slowBody.minBytesPerSecond, 0)
})
