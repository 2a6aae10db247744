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
 */
async function slowPosts (port, count) {
  const clients = []
  await Promise.all(Array.from({ length: count }, () => new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    const client = { socket, closed: false, data: '', sent: 0, timer: null }
    clients.push(client)
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => { client.data += chunk })
    socket.on('error', () => {})
    socket.on('close', () => {
      client.closed = true
      clearInterval(client.timer)
      resolve()
    })
    socket.on('connect', () => {
      socket.write('POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{')
      client.timer = setInterval(() => {
        if (client.sent++ >= 60 || socket.destroyed) return clearInterval(client.timer)
        socket.write(' ')
      }, 1000)
      resolve()
    })
  })))
  return {
    clients,
    closed: () => clients.filter((c) => c.closed).length,
    destroy: () => { for (const c of clients) { clearInterval(c.timer); c.socket.destroy() } }
  }
}

/** `total` normal requests, `concurrency` at a time, half GET /, half POST /echo; resolves with the count answered 200. */
async function normalClients (port, total, concurrency) {
  let next = 0
  let ok = 0
  async function one () {
    while (next < total) {
      const i = next++
      const res = i % 2 === 0
        ? await request(port, '/').catch(() => null)
        : await request(port, '/echo', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ i }) }).catch(() => null)
      if (res && res.status === 200 && (i % 2 === 0 || (res.json && res.json.got.i === i))) ok++
    }
  }
  await Promise.all(Array.from({ length: concurrency }, one))
  return ok
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
      const ok = await normalClients(cluster.port, 200, 4)
      assert.ok(ok >= 190, `at least 95% of normal requests answered: ${ok} of 200`)
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
