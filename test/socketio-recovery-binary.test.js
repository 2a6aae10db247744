'use strict'

/**
 * Binary payloads with socket.io's connectionStateRecovery (#24): a Buffer
 * emitted on one worker arrives as a Buffer on the clients of another
 * worker, in the replay a recovered client gets, and across hosts through
 * the Redis stream, whatever the bus serialization. Real clusters, real
 * socket.io-client clients; no timing thresholds.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const Redis = require('ioredis')
const { io: connectClient } = require('socket.io-client')
const { startCluster } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { RECOVERY_FIXTURE: fixture, recoverySuite, recoveryEnv } = require('./helpers/socketio-recovery')
const { ask } = require('./helpers/socketio-sender')
const { createTcpProxy } = require('./helpers/tcp-proxy')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')

const { sockets, cleanups } = recoverySuite()

const env = recoveryEnv

/**
 * A client in room 'r' that records every 'msg' (with whether it came in a
 * recovery's replay: socket.io-client hands the missed packets over just
 * before 'connect'). It does not reconnect by itself: the test cuts it and
 * reconnects it when the packet to replay has been sent.
 */
function receiver (port, name) {
  const socket = connectClient(`http://127.0.0.1:${port}`, { transports: ['websocket'], forceNew: true, reconnection: false, query: { room: 'r', name } })
  sockets.push(socket)
  const client = { socket, name, got: [], connects: [], cuts: [], reconnecting: false }
  socket.on('msg', (data, extra, offset) => client.got.push({ data, extra, offset, replayed: client.reconnecting }))
  socket.on('disconnect', (reason) => client.cuts.push(reason))
  socket.on('connect', () => {
    client.reconnecting = false
    client.connects.push({ id: socket.id, recovered: socket.recovered })
  })
  return client
}

/** Cut the client's connection the way a network failure does (a recoverable 'transport close' on the server). */
async function cut (client) {
  const cuts = client.cuts.length
  client.socket.io.engine.close()
  await eventually(() => client.cuts.length === cuts + 1, { what: `${client.name} cut` })
}

async function reconnect (client) {
  const connects = client.connects.length
  client.reconnecting = true
  client.socket.connect()
  await eventually(() => client.connects.length === connects + 1, { what: `${client.name} reconnected` })
}

const message = (client, n) => client.got.find((m) => m.data.n === n)

/** Message `n` (from the fixture's 'send-binary') reached `client` with its binaries as Buffers. */
function assertBinaries (client, n, how) {
  const got = message(client, n)
  assert.ok(got, `${client.name} got message ${n}`)
  const { data, extra } = got
  assert.ok(Buffer.isBuffer(data.bin), `${client.name} (${how}): message ${n}'s bin arrived as ${JSON.stringify(data.bin)}`)
  assert.deepStrictEqual([...data.bin], [n, 0, 255])
  assert.ok(Buffer.isBuffer(extra.nested[0]), `${client.name} (${how}): a nested binary arrived as ${JSON.stringify(extra.nested)}`)
  assert.deepStrictEqual([...extra.nested[0]], [7, n])
  assert.strictEqual(data.room, 'r')
  assert.strictEqual(typeof got.offset, 'string', 'with its offset')
}

for (const serialization of ['json', 'advanced']) {
  test(`recovery on, bus.serialization '${serialization}': binaries arrive as Buffers on the other worker, on the sender's, and in a recovered client's replay`, { timeout: 90000 }, async () => {
    const cluster = await startCluster(fixture, { env: env({ workers: 2, bus: { serialization } }) })
    const clients = []
    for (let i = 0; i < 24 && new Set(clients.map((c) => c.pid)).size < 2; i++) {
      const client = receiver(cluster.port, `client-${i}`)
      await eventually(() => client.socket.connected, { what: `client-${i} connected` })
      client.pid = (await ask(client.socket, 'whoami')).pid
      clients.push(client)
    }
    const sender = clients[0]
    const other = clients.find((c) => c.pid !== sender.pid)
    assert.ok(other, 'clients on both workers')

    // Live: through the primary, numbered, to the other worker; the sender's worker settles its own copy.
    await ask(sender.socket, 'send-binary', 'r', 1)
    await eventually(() => message(sender, 1) && message(other, 1), { what: 'message 1 on both workers' })
    assertBinaries(sender, 1, 'live, the sending worker')
    assertBinaries(other, 1, 'live, another worker')

    // Replay from the primary's log: missed while cut, given back on recovery.
    await cut(other)
    await ask(sender.socket, 'send-binary', 'r', 2)
    // Numbered by the primary (the sender's worker delivers it once it has its offset): in the log now.
    await eventually(() => message(sender, 2), { what: 'message 2 numbered and delivered on the sending worker' })
    await reconnect(other)
    assert.deepStrictEqual(other.connects.map((c) => c.recovered), [false, true], 'recovered')
    await eventually(() => message(other, 2), { what: 'message 2 replayed' })
    assert.strictEqual(message(other, 2).replayed, true, 'message 2 came in the replay')
    assertBinaries(other, 2, 'replayed')
    await cluster.stop()
  })
}

test('recovery on with bus.redis, two clusters on one Redis: binaries arrive as Buffers from the other host and in a replay from the stream on another host', { timeout: 120000 }, async (t) => {
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const bus = { redis: REDIS_URL, channel: uniquePrefix('sio-rec-bin') }
  cleanups.push(() => deletePrefix('{' + bus.channel))
  const a = await startCluster(fixture, { env: env({ workers: 1, bus }) })
  const b = await startCluster(fixture, { env: env({ workers: 1, bus }) })
  const proxy = await createTcpProxy(a.port)
  cleanups.push(proxy.close)
  const moving = receiver(proxy.port, 'moving')
  const onA = receiver(a.port, 'stays-on-a')
  const onB = receiver(b.port, 'stays-on-b')
  await eventually(() => [moving, onA, onB].every((c) => c.socket.connected), { what: 'every client connected' })

  // Each host reads the stream once its namespace is known there: send until each hears the other.
  let probe = 0
  await eventually(async () => {
    probe++
    await ask(onA.socket, 'send', 'r', `probe-a-${probe}`)
    await ask(onB.socket, 'send', 'r', `probe-b-${probe}`)
    return onA.got.some((m) => /^probe-b/.test(m.data.n)) && onB.got.some((m) => /^probe-a/.test(m.data.n))
  }, { what: () => `both clusters hear each other\n--- A ---\n${a.output}\n--- B ---\n${b.output}`, intervalMs: 200 })

  // Live from the stream: sent on B, to the clients of A.
  await ask(onB.socket, 'send-binary', 'r', 1)
  await eventually(() => [moving, onA, onB].every((c) => message(c, 1)), { what: 'message 1 everywhere' })
  for (const client of [moving, onA, onB]) assertBinaries(client, 1, 'live through the stream')

  // Cut from A, missed a binary broadcast, recovered on B: the session and the packet come from Redis.
  proxy.cut()
  await eventually(() => moving.cuts.length === 1, { what: 'the moving client cut' })
  // A's worker persists the session in Redis (the client is held by the proxy meanwhile), where B finds it.
  const redis = new Redis(REDIS_URL)
  cleanups.push(() => redis.quit())
  await eventually(async () => (await redis.zcard(`{${bus.channel}}:sio:idx:/`)) === 1, { what: 'the session persisted in Redis' })
  await ask(onA.socket, 'send-binary', 'r', 2)
  await eventually(() => message(onA, 2) && message(onB, 2), { what: 'message 2 in the stream, read by both hosts' })
  proxy.release(b.port)
  await reconnect(moving)
  assert.ok(b.workerPids.has((await ask(moving.socket, 'whoami')).pid), 'the moving client is on cluster B now')
  assert.deepStrictEqual(moving.connects.map((c) => c.recovered), [false, true], 'recovered')
  await eventually(() => message(moving, 2), { what: 'message 2 replayed' })
  assert.strictEqual(message(moving, 2).replayed, true, 'message 2 came in the replay')
  assertBinaries(moving, 2, 'replayed from the stream on another host')
  assertBinaries(onB, 2, 'live through the stream')
  for (const socket of sockets) socket.disconnect()
  await a.stop()
  await b.stop()
})
