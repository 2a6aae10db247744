'use strict'

/**
 * socket.io across real workers with `io.adapter(createAdapter())` from
 * clusterize-express/socket.io: emit to all, rooms, fetchSockets,
 * socketsJoin, serverSideEmit with acks and disconnectSockets reach every
 * worker, over the clusterize bus.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { io: connectClient } = require('socket.io-client')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/socketio-cluster.js')
const clients = []

after(async () => {
  for (const client of clients) client.disconnect()
  await stopAll()
})

function connect (port, room) {
  const socket = connectClient(`http://127.0.0.1:${port}`, { transports: ['websocket'], reconnection: false, query: room ? { room } : {}, forceNew: true })
  clients.push(socket)
  const client = { socket, got: [] }
  for (const event of ['all', 'room']) socket.on(event, (data) => client.got.push({ event, data }))
  client.hello = new Promise((resolve, reject) => {
    socket.once('hello', resolve)
    socket.once('connect_error', reject)
  })
  return client
}

/** Emit with an acknowledgement; rejects if the server does not answer within 10 s. */
const ask = (client, event, ...args) => new Promise((resolve, reject) => {
  client.socket.timeout(10000).emit(event, ...args, (err, value) => err ? reject(new Error(`${event}: ${err.message}`)) : resolve(value))
})

test('io.emit, rooms, fetchSockets, socketsJoin, serverSideEmit and disconnectSockets reach every worker', async () => {
  const cluster = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2 }) } })
  // Connect until both workers hold clients (each new connection goes to one of them).
  const connected = []
  for (let i = 0; i < 24 && new Set(connected.map((c) => c.worker)).size < 2; i++) {
    const client = connect(cluster.port, i % 2 === 0 ? 'even' : 'odd')
    client.worker = (await client.hello).worker
    connected.push(client)
  }
  assert.strictEqual(new Set(connected.map((c) => c.worker)).size, 2, 'clients on both workers')
  const first = connected[0]
  const other = connected.find((c) => c.worker !== first.worker)

  await ask(first, 'emit-all', 'hi-everyone')
  await eventually(() => connected.every((c) => c.got.some((g) => g.event === 'all' && g.data.tag === 'hi-everyone')), { what: 'io.emit on every client of both workers' })

  const evens = connected.filter((c, i) => i % 2 === 0)
  await ask(other, 'emit-room', 'even', 'evens-only')
  await eventually(() => evens.every((c) => c.got.some((g) => g.event === 'room' && g.data.tag === 'evens-only')), { what: 'to(room).emit across workers' })
  for (const c of connected.filter((c, i) => i % 2 === 1)) assert.ok(!c.got.some((g) => g.data.tag === 'evens-only'), 'odd clients got nothing')

  const ids = await ask(first, 'fetch')
  assert.deepStrictEqual(ids, connected.map((c) => c.socket.id).sort(), 'fetchSockets() sees the sockets of both workers')

  await ask(first, 'join-all', 'everyone')
  // socketsJoin() is applied by each worker when its message arrives: emit until every client is in.
  await eventually(async () => {
    await ask(other, 'emit-room', 'everyone', 'joined')
    return connected.every((c) => c.got.some((g) => g.event === 'room' && g.data.tag === 'joined'))
  }, { what: 'socketsJoin() on both workers', intervalMs: 100 })

  const sse = await ask(first, 'server-side')
  assert.strictEqual(sse.err, null)
  assert.deepStrictEqual(sse.answers.map((a) => a.worker), [other.worker], 'serverSideEmit reaches the other worker and its ack comes back')

  const closed = connected.map((c) => new Promise((resolve) => c.socket.once('disconnect', resolve)))
  await ask(first, 'disconnect-all')
  await Promise.all(closed)
  await cluster.stop()
})

for (const serialization of ['json', 'advanced']) {
  test(`binary payloads reach clients on the other worker as Buffers, with bus.serialization '${serialization}' (broadcast, and a serverSideEmit answer)`, async () => {
    const cluster = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, bus: { serialization } }) } })
    const connected = []
    for (let i = 0; i < 24 && new Set(connected.map((c) => c.worker)).size < 2; i++) {
      const client = connect(cluster.port)
      client.worker = (await client.hello).worker
      client.bin = new Promise((resolve) => client.socket.once('bin', (blob, extra) => resolve({ blob, extra })))
      connected.push(client)
    }
    assert.strictEqual(new Set(connected.map((c) => c.worker)).size, 2, 'clients on both workers')
    const first = connected[0]
    const other = connected.find((c) => c.worker !== first.worker)
    await ask(first, 'emit-binary')
    for (const client of [first, other]) {
      const { blob, extra } = await client.bin
      assert.ok(Buffer.isBuffer(blob), `worker ${client.worker} got ${JSON.stringify(blob)}`)
      assert.deepStrictEqual([...blob], [0, 1, 2, 255])
      assert.ok(Buffer.isBuffer(extra.nested[0]), `nested: ${JSON.stringify(extra.nested)}`)
      assert.deepStrictEqual([...extra.nested[0]], [7, 8])
      assert.strictEqual(extra.text, 'plain')
    }
    const sse = await ask(first, 'server-side')
    assert.strictEqual(sse.err, null)
    assert.ok(Buffer.isBuffer(sse.answers[0].blob), `answer: ${JSON.stringify(sse.answers[0])}`)
    assert.strictEqual(sse.answers[0].blob.toString(), `from ${other.worker}`)
    await cluster.stop()
  })
}

test('requiring clusterize-express/socket.io loads nothing of socket.io until createAdapter() is called', () => {
  const { execFileSync } = require('child_process')
  const out = execFileSync(process.execPath, ['-e', `
    require(${JSON.stringify(path.join(__dirname, '..'))})
    const loaded = () => Object.keys(require.cache).some((k) => /node_modules[\\\\/]socket\\.io/.test(k))
    const before = loaded()
    const { createAdapter } = require('clusterize-express/socket.io')
    const afterRequire = loaded()
    createAdapter()
    console.log(JSON.stringify({ before, afterRequire, afterCreate: loaded() }))
  `], { encoding: 'utf8' })
  assert.deepStrictEqual(JSON.parse(out), { before: false, afterRequire: false, afterCreate: true })
})

test("long polling across 2 workers, all clients from one address (as behind a proxy), a new connection per request: 'sticky' with sticky.sid", async () => {
  const cluster = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, scheduling: 'sticky', sticky: { sid: true } }), CZ_SIO_TRANSPORTS: 'polling' } })
  const polling = []
  for (let i = 0; i < 6; i++) {
    const socket = connectClient(`http://127.0.0.1:${cluster.port}`, { transports: ['polling'], reconnection: false, forceNew: true, agent: false })
    clients.push(socket)
    const client = { socket, got: [] }
    socket.on('all', (data) => client.got.push(data))
    client.hello = await new Promise((resolve, reject) => {
      socket.once('hello', resolve)
      socket.once('connect_error', reject)
    })
    polling.push(client)
  }
  assert.strictEqual(new Set(polling.map((c) => c.hello.worker)).size, 2, 'new sessions are spread over both workers although every client has the same address')
  for (const client of polling) assert.match(client.socket.io.engine.id, /^w[01]\./, 'the session id names its worker')
  // Every later request of a session (each on a new connection) must reach the worker that holds it.
  for (const client of polling) await ask(client, 'emit-all', `from-${client.hello.worker}`)
  await eventually(() => polling.every((c) => c.got.length === polling.length), { what: 'every broadcast on every polling client' })
  await cluster.stop()
})

test('a burst of broadcasts reaches every client once and in order, in far fewer TCP writes than messages (coalesceWrites), also after an upgrade from polling', async () => {
  const { connectBareClient } = require('./helpers/bare-socketio-client')
  const BURST = 200
  const cluster = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, scheduling: 'sticky', sticky: { sid: true } }), CZ_SIO_TRANSPORTS: 'polling,websocket' } })
  const receivers = []
  function track (tcp) {
    const receiver = { seq: [], chunks: 0, counting: false }
    tcp.on('data', () => { if (receiver.counting) receiver.chunks++ })
    receivers.push(receiver)
    return receiver
  }
  // Bare WebSocket clients until both workers hold one.
  const workers = new Set()
  const bare = []
  for (let i = 0; i < 8 && workers.size < 2; i++) {
    let receiver
    const hello = new Promise((resolve) => {
      const client = connectBareClient(cluster.port, {
        onEvent (frame) {
          const [name, data] = JSON.parse(frame.slice(2))
          if (name === 'hello') resolve(data.worker)
          else if (name === 'seq') receiver.seq.push(data)
        }
      })
      bare.push(client)
      client.ready.then(() => { receiver = track(client.tcp()) })
    })
    workers.add(await hello)
  }
  assert.strictEqual(workers.size, 2, 'bare clients on both workers')
  // A socket.io-client that starts with long polling and upgrades to WebSocket.
  const upgraded = connectClient(`http://127.0.0.1:${cluster.port}`, { reconnection: false, forceNew: true })
  clients.push(upgraded)
  await new Promise((resolve, reject) => {
    upgraded.io.engine.once('upgrade', resolve)
    upgraded.once('connect_error', reject)
  })
  const viaUpgrade = track(upgraded.io.engine.transport.ws._socket)
  upgraded.on('seq', (i) => viaUpgrade.seq.push(i))

  for (const receiver of receivers) receiver.counting = true
  assert.deepStrictEqual(await bare[0].request('burst', BURST), [], 'the burst was emitted')
  const expected = Array.from({ length: BURST }, (_, i) => i)
  await eventually(() => receivers.every((r) => r.seq.length >= BURST), { what: `${BURST} messages on every client` })
  for (const receiver of receivers) {
    assert.deepStrictEqual(receiver.seq, expected, 'every message once, in order')
    assert.ok(receiver.chunks <= BURST / 10, `the ${BURST} frames came in ${receiver.chunks} TCP reads: writes were not coalesced`)
  }
  for (const client of bare) client.close()
  await cluster.stop()
})

test('bad input: createAdapter({ coalesceWrites }) takes a boolean', () => {
  const { createAdapter } = require('clusterize-express/socket.io')
  assert.throws(() => createAdapter({ coalesceWrites: 'yes' }), /createAdapter\(\{ coalesceWrites \}\) must be true or false, got yes/)
})

test('two clusters on one Redis (bus.redis): a room broadcast on one reaches the clients of the other', async (t) => {
  const { REDIS_URL, uniquePrefix, redisTestOptions } = require('./helpers/redis')
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const bus = { redis: REDIS_URL, channel: uniquePrefix('sio-two-clusters') }
  const a = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, bus }) } })
  const b = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, bus }) } })
  const onA = connect(a.port, 'lobby')
  const onB = connect(b.port)
  await Promise.all([onA.hello, onB.hello])
  // The bridge connects in the background: emit until the other host hears it.
  await eventually(async () => {
    await ask(onB, 'emit-room', 'lobby', 'across-hosts')
    return onA.got.some((g) => g.event === 'room' && g.data.tag === 'across-hosts')
  }, { what: 'a room broadcast across two clusters', intervalMs: 200 })
  await a.stop()
  await b.stop()
})

test('bad input: an emit over bus.maxMessageBytes fails with a clear error in the emitting worker', async () => {
  const cluster = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, bus: { maxMessageBytes: 4096 } }) } })
  const client = connect(cluster.port)
  await client.hello
  const answer = await ask(client, 'emit-big', 8192)
  assert.strictEqual(answer.code, 'ERR_CLUSTERIZE_BUS_TOO_LARGE')
  assert.match(answer.message, /over the limit of 4096 bytes \(option bus\.maxMessageBytes\)/)
  // The fetch answer is written after anything the refused emit would have sent this client.
  assert.strictEqual((await ask(client, 'fetch')).length, 1, 'the worker still serves')
  assert.deepStrictEqual(client.got, [], 'the refused emit reached no one, not even the sending worker\'s clients')
  await cluster.stop()
})

test('bad input: createAdapter() used on something that is not a socket.io namespace says how to use it', () => {
  const { createAdapter } = require('clusterize-express/socket.io')
  const factory = createAdapter()
  assert.throws(() => factory(require('http').createServer()), /createAdapter\(\) returns what socket\.io's io\.adapter\(\) takes/)
  assert.throws(() => factory(undefined), /io\.adapter\(createAdapter\(\)\)/)
})
