'use strict'

/**
 * socket.io's connectionStateRecovery across reloads (#12): clients cut by a
 * reload (1012) reconnect to a new worker and get the messages they missed,
 * each once and in order, with their socket id, rooms and socket.data back.
 * Real clusters, real socket.io-client clients; no timing thresholds.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { io: connectClient } = require('socket.io-client')
const { startCluster } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { RECOVERY_FIXTURE: fixture, recoverySuite, recoveryEnv } = require('./helpers/socketio-recovery')
const { ask, startSender, stopAndDeliver, assertRecoveredEachTime, assertUnsureAllOrNone } = require('./helpers/socketio-sender')

const { sockets } = recoverySuite()

const env = (recovery, extra) => recoveryEnv(Object.assign({ workers: 2, reload: { bakeMs: 0 } }, extra), recovery)

/**
 * A client in `room` that records every 'msg' and every (re)connection.
 * CZ_TEST_RECONNECT_MS=0 makes clients reconnect at once (races the old worker's persist).
 */
function receiver (port, room, name) {
  const socket = connectClient(`http://127.0.0.1:${port}`, {
    transports: ['websocket'],
    forceNew: true,
    query: { room, name },
    reconnectionDelay: Number(process.env.CZ_TEST_RECONNECT_MS || 50),
    reconnectionDelayMax: 200
  })
  sockets.push(socket)
  const client = { socket, room, name, got: [], args: [], connects: [], replayed: 0 }
  socket.on('msg', (data, ...rest) => {
    client.got.push(data.n)
    client.args.push(rest)
  })
  // socket.io-client hands over the missed packets just before 'connect': those are the replayed ones.
  socket.on('disconnect', () => { client.cut = client.got.length })
  socket.on('connect', () => {
    if (client.cut !== undefined) client.replayed += client.got.length - client.cut
    client.cut = undefined
    client.connects.push({ id: socket.id, recovered: socket.recovered })
  })
  return client
}

/** Resolve with every client's whoami once all are connected to workers not in `oldPids`. */
async function onNewWorkers (clients, oldPids) {
  let answers = []
  await eventually(async () => {
    if (!clients.every((c) => c.socket.connected)) return false
    answers = await Promise.all(clients.map((c) => ask(c.socket, 'whoami').catch(() => null)))
    return answers.every((w) => w !== null && !oldPids.has(w.pid))
  }, { what: 'every client reconnected to a new worker', intervalMs: 100 })
  return answers
}

async function connectAll (clients) {
  await eventually(() => clients.every((c) => c.socket.connected), { what: 'every client connected' })
  return Promise.all(clients.map((c) => ask(c.socket, 'whoami')))
}

test('recovery through a reload delivers every message once: 3 reloads, rooms, socket.data and ids restored', { timeout: 180000 }, async (t) => {
  const cluster = await startCluster(fixture, { env: env(true) })
  const clients = []
  for (let i = 0; i < 8; i++) clients.push(receiver(cluster.port, i % 2 === 0 ? 'a' : 'b', `client-${i}`))
  const before = await connectAll(clients)
  assert.strictEqual(new Set(before.map((w) => w.pid)).size, 2, 'clients on both workers')
  const ids = clients.map((c) => c.socket.id)

  const senders = [startSender(cluster.port, 'a', sockets), startSender(cluster.port, 'b', sockets)]
  await eventually(() => senders.every((s) => s.acked.length >= 5), { what: 'senders under way' })

  let oldPids = new Set(before.map((w) => w.pid))
  for (let reload = 1; reload <= 3; reload++) {
    const result = await cluster.reload()
    assert.strictEqual(result.ok, true, `reload ${reload} succeeded`)
    // Every client was cut (1012, maybe twice: a rolling reload) and came back on a new worker.
    const now = await onNewWorkers(clients, oldPids)
    oldPids = new Set(now.map((w) => w.pid))
    const acked = senders.map((s) => s.acked.length)
    await eventually(() => senders.every((s, i) => s.acked.length >= acked[i] + 5), { what: `senders under way after reload ${reload}` })
  }
  // Everything acked has arrived everywhere.
  await stopAndDeliver(senders, clients)

  for (const c of clients) {
    const sender = senders.find((s) => s.room === c.room)
    // Exactly once, in order: strictly increasing numbers.
    for (let i = 1; i < c.got.length; i++) assert.ok(c.got[i] > c.got[i - 1], `${c.name}: message ${c.got[i]} after ${c.got[i - 1]} (duplicate or out of order)`)
    const got = new Set(c.got)
    for (const n of sender.acked) assert.ok(got.has(n), `${c.name} (room ${c.room}) missed message ${n}`)
    for (const n of c.got) assert.ok(sender.acked.includes(n) || sender.unsure.includes(n), `${c.name}: ${n} was never sent to room ${c.room}`)
    // Every event carried its offset: one extra string argument (socket.io's own format), never the same twice.
    assert.ok(c.args.every((extra) => extra.length === 1 && typeof extra[0] === 'string'), `${c.name}: one offset per event`)
    assert.strictEqual(new Set(c.args.map((extra) => extra[0])).size, c.args.length, `${c.name}: distinct offsets`)
    // Each reconnection was a recovery; the socket id stayed.
    assert.ok(c.connects.length >= 4, `${c.name}: cut by each reload`)
    assertRecoveredEachTime(c)
  }
  // A message whose ack was lost either reached every client of its room or none.
  assertUnsureAllOrNone(senders, clients)

  t.diagnostic(`messages sent: ${senders.map((s) => `room ${s.room}: ${s.acked.length} acked, ${s.unsure.length} unsure`).join('; ')}; ` +
    `replayed on recovery: ${clients.map((c) => c.replayed).join(', ')}; reconnections: ${clients.map((c) => c.connects.length - 1).join(', ')}`)

  const after = await connectAll(clients)
  after.forEach((w, i) => {
    assert.strictEqual(w.recovered, true)
    assert.strictEqual(w.id, ids[i], 'same socket id on the server')
    assert.strictEqual(w.data.name, clients[i].name, 'socket.data restored')
    assert.strictEqual(w.data.firstWorkerPid, before[i].pid, 'socket.data restored from the first worker')
    assert.deepStrictEqual(w.rooms.sort(), [ids[i], clients[i].room].sort(), 'rooms restored')
  })
  for (const socket of sockets) socket.disconnect()
  await cluster.stop()
})

test('a session restored on a connection that closes before its socket connects is put back: the next attempt recovers it', { timeout: 60000 }, async () => {
  const { connectBareClient } = require('./helpers/bare-socketio-client')
  const cluster = await startCluster(fixture, { env: env(true, { workers: 1 }) })
  const client = receiver(cluster.port, 'a', 'cut')
  const sender = receiver(cluster.port, 'b', 'sender')
  const [first] = await connectAll([client, sender])
  await ask(sender.socket, 'send', 'a', 1)
  await eventually(() => client.got.includes(1), { what: 'message 1' })
  // What socket.io-client would send to be recovered.
  const auth = { pid: client.socket._pid, offset: client.socket._lastOffset }
  assert.strictEqual(typeof auth.pid, 'string')
  client.socket.io.reconnection(false)
  client.socket.io.engine.close() // "transport close": a recoverable reason, persisted
  await ask(sender.socket, 'send', 'a', 2) // missed while away

  // An attempt that hangs up right after its CONNECT: socket.io drops the socket it was restoring.
  const hangUp = connectBareClient(cluster.port, { auth, hangUpAfterConnect: true })
  await hangUp.closed
  // The session must still be there for the next attempt (retried: the put-back is asynchronous).
  let recovered = null
  await eventually(async () => {
    const events = []
    const attempt = connectBareClient(cluster.port, { auth, onEvent: (frame) => events.push(JSON.parse(frame.slice(2))) })
    const answer = await attempt.ready
    if (answer.sid !== first.id) {
      attempt.close()
      return false
    }
    recovered = { attempt, events }
    return true
  }, { what: 'a later attempt recovers the session', intervalMs: 100 })
  await eventually(() => recovered.events.some(([name, data]) => name === 'msg' && data.n === 2), { what: 'the missed message replayed' })
  assert.ok(!recovered.events.some(([name, data]) => name === 'msg' && data.n === 1), 'nothing received before the cut is replayed')
  recovered.attempt.close()
  await cluster.stop()
})

test('without connectionStateRecovery nothing changes: no offsets, a reload gives new sockets', { timeout: 60000 }, async () => {
  const cluster = await startCluster(fixture, { env: env(false) })
  const clients = [receiver(cluster.port, 'a', 'one'), receiver(cluster.port, 'a', 'two')]
  const oldPids = new Set((await connectAll(clients)).map((w) => w.pid))
  const firstIds = clients.map((c) => c.socket.id)
  await ask(clients[0].socket, 'send', 'a', 1)
  await eventually(() => clients.every((c) => c.got.includes(1)), { what: 'message 1 everywhere' })

  assert.strictEqual((await cluster.reload()).ok, true)
  const now = await onNewWorkers(clients, oldPids)
  await ask(clients[1].socket, 'send', 'a', 2)
  await eventually(() => clients.every((c) => c.got.includes(2)), { what: 'message 2 everywhere' })
  for (const c of clients) {
    assert.ok(c.connects.length >= 2 && c.connects.every((x) => !x.recovered), 'reconnected, not recovered')
    assert.deepStrictEqual(c.args, [[], []], 'no offset argument')
  }
  now.forEach((w, i) => {
    assert.notStrictEqual(w.id, firstIds[i], 'a new socket')
    assert.strictEqual(w.recovered, false)
    assert.strictEqual(w.data.name, clients[i].name, 'socket.data set afresh')
  })
  for (const socket of sockets) socket.disconnect()
  await cluster.stop()
})

test('an emit the bus refuses (over bus.maxMessageBytes) throws from io.emit() and reaches no one, with recovery on too', { timeout: 60000 }, async () => {
  const cluster = await startCluster(fixture, { env: env(true, { bus: { maxMessageBytes: 4096 } }) })
  const clients = [receiver(cluster.port, 'a', 'one'), receiver(cluster.port, 'a', 'two')]
  await connectAll(clients)
  const answer = await ask(clients[0].socket, 'emit-big', 8192)
  assert.strictEqual(answer.code, 'ERR_CLUSTERIZE_BUS_TOO_LARGE')
  assert.match(answer.message, /over the limit of 4096 bytes \(option bus\.maxMessageBytes\)/)
  await ask(clients[0].socket, 'send', 'a', 1)
  await eventually(() => clients.every((c) => c.got.includes(1)), { what: 'message 1 everywhere' })
  for (const c of clients) assert.deepStrictEqual(c.got, [1], `${c.name}: the refused emit reached no one`)
  for (const socket of sockets) socket.disconnect()
  await cluster.stop()
})

test('with bus.redis: clients of one host recover through its reloads, messages from the other host included', { timeout: 120000 }, async (t) => {
  const { REDIS_URL, uniquePrefix, redisTestOptions } = require('./helpers/redis')
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const bus = { redis: REDIS_URL, channel: uniquePrefix('sio-recovery') }
  const a = await startCluster(fixture, { env: env(true, { bus }) })
  const b = await startCluster(fixture, { env: env(true, { workers: 1, bus }) })
  const onA = []
  for (let i = 0; i < 4; i++) onA.push(receiver(a.port, 'a', `a-${i}`))
  const onB = [receiver(b.port, 'a', 'b-0')]
  const clients = onA.concat(onB)
  let oldPids = new Set((await connectAll(onA)).map((w) => w.pid))
  await connectAll(onB)
  // The bridges connect in the background: message 0 until host A hears host B.
  const probe = connectClient(`http://127.0.0.1:${b.port}`, { transports: ['websocket'], forceNew: true })
  sockets.push(probe)
  await eventually(async () => {
    await ask(probe, 'send', 'a', 0)
    return onA.every((c) => c.got.includes(0))
  }, { what: 'host B reaches host A', intervalMs: 200 })
  for (const c of clients) c.got = c.got.filter((n) => n !== 0)

  const sender = startSender(b.port, 'a', sockets)
  await eventually(() => sender.acked.length >= 5, { what: 'sender under way' })
  for (let reload = 1; reload <= 2; reload++) {
    assert.strictEqual((await a.reload()).ok, true)
    oldPids = new Set((await onNewWorkers(onA, oldPids)).map((w) => w.pid))
    const acked = sender.acked.length
    await eventually(() => sender.acked.length >= acked + 5, { what: `sender under way after reload ${reload}` })
  }
  await sender.stop()
  const last = sender.acked[sender.acked.length - 1]
  for (const c of clients) await eventually(() => c.got.includes(last), { what: `${c.name} got message ${last}` })
  for (const c of clients) {
    for (let i = 1; i < c.got.length; i++) assert.ok(c.got[i] > c.got[i - 1], `${c.name}: message ${c.got[i]} after ${c.got[i - 1]}`)
    const got = new Set(c.got)
    for (const n of sender.acked) assert.ok(got.has(n), `${c.name} missed message ${n}`)
  }
  for (const c of onA) assert.ok(c.connects.length >= 3 && c.connects.slice(1).every((x) => x.recovered), `${c.name}: recovered on every reconnection`)
  t.diagnostic(`sent ${sender.acked.length} acked, ${sender.unsure.length} unsure; replayed on host A: ${onA.map((c) => c.replayed).join(', ')}`)
  for (const socket of sockets) socket.disconnect()
  await a.stop()
  await b.stop()
})
