'use strict'

/**
 * socket.io connection-state recovery after a worker crash (#23.13): the
 * worker is SIGKILLed, so it never persists its sockets; the primary kept
 * each socket's id, rooms and socket.data as they changed, and its clients
 * reconnect recovered, with their rooms and every message they missed.
 * Real cluster, real socket.io-client clients; no timing thresholds.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { io: connectClient } = require('socket.io-client')
const { startCluster, waitDead } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { RECOVERY_FIXTURE: fixture, recoverySuite, recoveryEnv } = require('./helpers/socketio-recovery')
const { ask, startSender } = require('./helpers/socketio-sender')

const { sockets } = recoverySuite()

const env = (extra) => recoveryEnv(Object.assign({ workers: 2, reload: { bakeMs: 0 } }, extra))

/** A client in `room` (joined at connection) that records the messages of each room and every (re)connection. */
function receiver (port, room, name) {
  const socket = connectClient(`http://127.0.0.1:${port}`, {
    transports: ['websocket'],
    forceNew: true,
    query: { room, name },
    reconnectionDelay: 50,
    reconnectionDelayMax: 200
  })
  sockets.push(socket)
  const client = { socket, room, name, got: {}, connects: [] }
  socket.on('msg', (data) => { (client.got[data.room] = client.got[data.room] || []).push(data.n) })
  socket.on('connect', () => client.connects.push({ id: socket.id, recovered: socket.recovered }))
  return client
}

test('clients of a SIGKILLed worker reconnect recovered: same id, rooms joined at and after connection, socket.data, no missed message', { timeout: 120000 }, async (t) => {
  await crashAndRecover(t, {})
})

test('with bus.redis: the clients of a SIGKILLed worker reconnect recovered (their sessions persisted through the Redis log)', { timeout: 120000 }, async (t) => {
  const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const channel = uniquePrefix('sio-crash')
  try {
    await crashAndRecover(t, { bus: { redis: REDIS_URL, channel } })
  } finally {
    await deletePrefix('{' + channel)
  }
})

/**
 * 8 clients on 2 workers in rooms 'a' or 'b' (joined at connection) and
 * 'later' (joined after), two senders; one worker SIGKILLed under them.
 */
async function crashAndRecover (t, extra) {
  const cluster = await startCluster(fixture, { env: env(extra) })
  const clients = []
  for (let i = 0; i < 8; i++) clients.push(receiver(cluster.port, i % 2 === 0 ? 'a' : 'b', `client-${i}`))
  await eventually(() => clients.every((c) => c.socket.connected), { what: 'every client connected' })
  // A room joined after the connection: the primary must learn it as it changes.
  await Promise.all(clients.map((c) => ask(c.socket, 'join', 'later')))
  const before = await Promise.all(clients.map((c) => ask(c.socket, 'whoami')))
  const pids = [...new Set(before.map((w) => w.pid))]
  assert.strictEqual(pids.length, 2, 'clients on both workers')
  const victim = pids[0]
  const cut = clients.filter((c, i) => before[i].pid === victim)

  const senders = [startSender(cluster.port, 'a', sockets), startSender(cluster.port, 'later', sockets)]
  await eventually(() => senders.every((s) => s.acked.length >= 5), { what: 'senders under way' })
  process.kill(victim, 'SIGKILL')
  assert.ok(await waitDead(victim, 10000), 'the worker died')

  let now = []
  await eventually(async () => {
    if (!clients.every((c) => c.socket.connected)) return false
    now = await Promise.all(clients.map((c) => ask(c.socket, 'whoami').catch(() => null)))
    return now.every((w) => w !== null && w.pid !== victim)
  }, { what: 'every client of the killed worker reconnected', intervalMs: 100 })
  const acked = senders.map((s) => s.acked.length)
  await eventually(() => senders.every((s, i) => s.acked.length >= acked[i] + 5), { what: 'senders under way after the crash' })
  await Promise.all(senders.map((s) => s.stop()))

  for (const sender of senders) {
    const last = sender.acked[sender.acked.length - 1]
    for (const c of clients.filter((c) => sender.room === 'later' || c.room === sender.room)) {
      await eventually(() => (c.got[sender.room] || []).includes(last), { what: `${c.name} got message ${last} of room ${sender.room}` })
    }
  }
  for (const c of cut) {
    const i = clients.indexOf(c)
    assert.ok(c.connects.length >= 2, `${c.name} was cut by the crash`)
    assert.deepStrictEqual(c.connects.map((x) => x.recovered), [false].concat(c.connects.slice(1).map(() => true)), `${c.name}: recovered after the crash`)
    assert.ok(c.connects.every((x) => x.id === before[i].id), `${c.name}: same socket id`)
    assert.strictEqual(now[i].recovered, true)
    assert.strictEqual(now[i].id, before[i].id, 'same socket id on the server')
    assert.deepStrictEqual(now[i].rooms.sort(), [before[i].id, c.room, 'later'].sort(), `${c.name}: rooms restored`)
    assert.deepStrictEqual(now[i].data, before[i].data, `${c.name}: socket.data restored`)
  }
  for (const c of clients) {
    for (const sender of senders) {
      if (sender.room !== 'later' && sender.room !== c.room) continue
      const got = c.got[sender.room] || []
      for (let i = 1; i < got.length; i++) assert.ok(got[i] > got[i - 1], `${c.name}: message ${got[i]} after ${got[i - 1]} in room ${sender.room} (duplicate or out of order)`)
      for (const n of sender.acked) assert.ok(got.includes(n), `${c.name} missed message ${n} of room ${sender.room}`)
    }
  }
  t.diagnostic(`cut clients: ${cut.length}; sent ${senders.map((s) => `${s.room}: ${s.acked.length} acked, ${s.unsure.length} unsure`).join('; ')}`)
  for (const socket of sockets) socket.disconnect()
  await cluster.stop()
}
