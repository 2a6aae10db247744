'use strict'

/**
 * WebSockets with a stock `ws` server: counted in heartbeats, and closed
 * with a proper close frame (1012 on reload, 1001 on shutdown, never 1006)
 * once the replacement is ready; an onDrain hook speaks first.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const WebSocket = require('ws')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/ws-cluster.js')
const env = (options, extra) => Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options) }, extra)

after(stopAll)

/** Connect and collect messages and the close code. */
function connect (port) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/`)
  const client = { ws, messages: [], closed: null }
  client.opened = new Promise((resolve, reject) => {
    ws.once('open', resolve)
    ws.once('error', reject)
  })
  client.greeted = new Promise((resolve) => {
    ws.on('message', (data) => {
      const message = JSON.parse(String(data))
      client.messages.push(message)
      if (message.hello) resolve(message)
    })
  })
  client.closed = new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: String(reason) })))
  return client
}

for (const scheduling of ['rr', 'none']) {
  test(`'${scheduling}': a reload closes each WebSocket with 1012 after the new worker is ready; reconnecting lands on the new generation`, async () => {
    const cluster = await startCluster(fixture, { env: env({ workers: 1, scheduling, health: { heartbeatMs: 100 }, reload: { bakeMs: 0 } }) })
    const client = connect(cluster.port)
    const hello = await client.greeted
    assert.strictEqual(hello.generation, 1)
    await eventually(async () => (await cluster.stats()).workers[0].heartbeat.webSockets === 1)
    const reloaded = cluster.reload()
    const closed = await client.closed
    assert.strictEqual(closed.code, 1012, JSON.stringify(closed))
    const ready = cluster.events.find((e) => e.event === 'worker:ready' && e.data.generation === 2)
    assert.ok(ready, 'the replacement was ready before the close')
    const again = connect(cluster.port)
    const second = await again.greeted
    assert.strictEqual(second.generation, 2)
    assert.notStrictEqual(second.hello, hello.hello)
    assert.strictEqual((await reloaded).ok, true)
    again.ws.close()
    await again.closed
    await cluster.stop()
  })
}

test('shutdown closes WebSockets with 1001, after the onDrain hook said goodbye', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2 }, { CZ_WS_GOODBYE: '1' }) })
  const clients = [connect(cluster.port), connect(cluster.port)]
  await Promise.all(clients.map((c) => c.greeted))
  cluster.signal('SIGTERM')
  for (const client of clients) {
    const closed = await client.closed
    assert.strictEqual(closed.code, 1001, JSON.stringify(closed))
    assert.deepStrictEqual(client.messages.filter((m) => m.goodbye), [{ goodbye: 'shutdown' }])
  }
  assert.strictEqual((await cluster.exit).code, 0)
})

test('a WebSocket client that never answers the close frame is cut (after the close handshake time, within the drain deadline), and the old worker still exits', async () => {
  const net = require('net')
  const cluster = await startCluster(fixture, { env: env({ workers: 1, reload: { bakeMs: 0, drainTimeoutMs: 1500 } }) })
  const oldPid = (await cluster.stats()).workers[0].pid
  // A hand-written client: it upgrades, then reads and ignores everything, never closing.
  const socket = net.connect(cluster.port, '127.0.0.1')
  socket.write('GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n')
  let received = Buffer.alloc(0)
  socket.on('data', (chunk) => { received = Buffer.concat([received, chunk]) })
  socket.on('error', () => {})
  const closed = new Promise((resolve) => socket.once('close', resolve))
  await eventually(() => received.includes('101 Switching Protocols'), { what: 'the upgrade' })
  const result = await cluster.reload()
  assert.strictEqual(result.ok, true)
  await closed
  const closeFrame = received.indexOf(Buffer.from([0x88]))
  assert.ok(closeFrame > 0 && received.readUInt16BE(closeFrame + 2) === 1012, 'a 1012 close frame was sent first')
  await cluster.waitEvent('worker:exit', (d) => d.pid === oldPid)
  await cluster.stop()
})

// RFC 6455 5.5.1: one Close frame per connection, and no data frame after it.
test('a reload sends each WebSocket exactly one Close (1012) and no data frame after it, although the app keeps sending', async () => {
  const { connectRawWebSocket } = require('./helpers/raw-websocket')
  const cluster = await startCluster(fixture, { env: env({ workers: 1, reload: { bakeMs: 0 } }, { CZ_WS_TICK_MS: '20' }) })
  const client = await connectRawWebSocket(cluster.port)
  await eventually(() => client.frames.some((f) => f.text === 'tick'), { what: 'the app ticking' })
  assert.strictEqual((await cluster.reload()).ok, true)
  await client.closed
  assert.deepStrictEqual(client.closes(), [{ type: 'close', code: 1012, reason: 'server restarting' }], JSON.stringify(client.frames.slice(-5)))
  assert.deepStrictEqual(client.afterFirstClose(), [], 'nothing after the Close')
  await cluster.stop()
})

test('shutdown sends each WebSocket exactly one Close (1001) and no data frame after it', async () => {
  const { connectRawWebSocket } = require('./helpers/raw-websocket')
  const cluster = await startCluster(fixture, { env: env({ workers: 1 }, { CZ_WS_TICK_MS: '20' }) })
  const client = await connectRawWebSocket(cluster.port)
  await eventually(() => client.frames.some((f) => f.text === 'tick'), { what: 'the app ticking' })
  cluster.signal('SIGTERM')
  await client.closed
  assert.deepStrictEqual(client.closes(), [{ type: 'close', code: 1001, reason: 'server going away' }], JSON.stringify(client.frames.slice(-5)))
  assert.deepStrictEqual(client.afterFirstClose(), [])
  assert.strictEqual((await cluster.exit).code, 0)
})

test('a WebSocket the app closes in onDrain keeps its own Close (4000) and gets no second one', async () => {
  const { connectRawWebSocket } = require('./helpers/raw-websocket')
  const cluster = await startCluster(fixture, { env: env({ workers: 1, reload: { bakeMs: 0 } }, { CZ_WS_TICK_MS: '20', CZ_WS_CLOSE_ON_DRAIN: '4000' }) })
  const client = await connectRawWebSocket(cluster.port)
  await eventually(() => client.frames.some((f) => f.text === 'tick'), { what: 'the app ticking' })
  assert.strictEqual((await cluster.reload()).ok, true)
  await client.closed
  assert.deepStrictEqual(client.closes(), [{ type: 'close', code: 4000, reason: 'app says bye' }], JSON.stringify(client.frames.slice(-5)))
  assert.deepStrictEqual(client.afterFirstClose(), [])
  await cluster.stop()
})

test('a WebSocket no ws owns (another library) still gets a Close (1012) written by clusterize on reload', async () => {
  const { connectRawWebSocket } = require('./helpers/raw-websocket')
  const cluster = await startCluster(fixture, { env: env({ workers: 1, reload: { bakeMs: 0 } }, { CZ_WS_RAW: '1' }) })
  const client = await connectRawWebSocket(cluster.port)
  await eventually(() => client.frames.some((f) => f.type === 'text'), { what: 'the greeting' })
  assert.strictEqual((await cluster.reload()).ok, true)
  await client.closed
  assert.deepStrictEqual(client.closes(), [{ type: 'close', code: 1012, reason: 'server restarting' }])
  await cluster.stop()
})
