'use strict'

/**
 * The socket.io recovery state across a primary upgrade
 * (lib/realtime/recovery-handover.js), in process: two recovery services
 * (the old primary's and the new one's) joined by a channel that copies each
 * message as the upgrade's JSON IPC channel does. The cluster-level proof is
 * test/upgrade-socketio.test.js; this one pins the rules: offsets go on from
 * the old ones, sessions keep their expiry, the relay numbers the old
 * workers' broadcasts in the one sequence and sends them down, a restore on
 * the new primary waits for an old worker's persist, app values survive
 * with bus.serialization 'advanced', and a cancelled handover never gives an
 * offset twice.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { RecoveryService } = require('../lib/realtime/recovery-service')
const { handOver, takeOver, BATCH } = require('../lib/realtime/recovery-handover')

const session = (pid, rooms, data) => ({ sid: 'sid-' + pid, pid, rooms, data: data || { name: pid } })
const broadcast = (uid, n) => ({ uid, nsp: '/', type: 3, data: { packet: { type: 2, data: ['msg', n] }, opts: { rooms: [], except: [] } } })

/** A recovery service whose deliveries to its workers are recorded; `notify` is a notification from one of them. */
function primary () {
  const delivered = []
  const service = new RecoveryService({ broadcast: (topic, message) => { if (topic.startsWith('sio:')) delivered.push(message) } })
  const notify = (data) => service.onQueueMessage(data, service.fromThisHost)
  return { service, delivered, notify }
}

/** The upgrade: the new side first (it listens), then the old one hands over; both ways copied as JSON. */
function upgrade (old, next, serialization) {
  const copy = (x) => JSON.parse(JSON.stringify(x))
  next.service.hold()
  let handover = null
  const taking = takeOver(next.service, { send: (kind, x) => handover.onMessage(copy(x)) })
  handover = handOver(old.service, {
    serialization,
    send: (kind, x) => kind === 'recovery' ? taking.onRecovery(copy(x)) : taking.onRelay(copy(x))
  })
  taking.go()
  return { handover, taking }
}

test('offsets go on from the old primary\'s; packets and sessions (with their expiry) move in batches', async () => {
  const old = primary()
  const count = BATCH * 2 + 7
  for (let i = 1; i <= count; i++) old.notify({ op: 'pub', n: '/', i, m: broadcast('w1', i) })
  const offsets = old.delivered.map((m) => m.o)
  for (let i = 0; i < BATCH + 3; i++) old.service.persist('/', session('other-' + i, ['sid-other-' + i]))
  await old.service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1']) })
  const expiresAt = old.service.log.namespace('/').sessions.get('p1').expiresAt

  const next = primary()
  next.service.hold()
  // A new worker's broadcast before the state came: held, then numbered after the old ones.
  next.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w2', 'held') })
  assert.strictEqual(next.delivered.length, 0, 'held until the state is taken over')
  upgrade(old, next)
  const state = next.service.log.namespace('/')
  assert.strictEqual(next.delivered[0].o, state.offsetOf(count + 1), 'numbered after the last old offset')
  assert.strictEqual(state.epoch, old.service.log.namespace('/').epoch)
  assert.strictEqual(state.sessions.get('p1').expiresAt, expiresAt, 'the session keeps its expiry')
  assert.strictEqual(state.sessions.size, BATCH + 4, 'every session, over several batches')
  assert.strictEqual(state.size, count + 1, 'every packet, over several batches (and the held one)')

  const restored = await next.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offsets[count - 3] })
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), [count - 1, count, 'held'])
})

test('after the handover the old workers\' broadcasts are numbered by the new primary and sent down; restores and persists go there too', async () => {
  const old = primary()
  old.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w1', 1) })
  const first = old.delivered[0].o
  const next = primary()
  upgrade(old, next)
  old.notify({ op: 'pub', n: '/', i: 2, m: broadcast('w1', 2) })
  next.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w2', 3) })
  const state = next.service.log.namespace('/')
  // One sequence for both sets of workers, each packet on both sides, in that order.
  assert.deepStrictEqual(next.delivered.map((m) => m.o), [state.offsetOf(2), state.offsetOf(3)])
  assert.deepStrictEqual(old.delivered.map((m) => [m.o, m.i, m.m.uid]), [[first, 1, 'w1'], [state.offsetOf(2), 2, 'w1'], [state.offsetOf(3), 1, 'w2']])
  assert.strictEqual(old.service.log.namespace('/').seq, 3, 'kept on the old side too')

  // An old worker persists (relayed); a new worker restores it.
  assert.strictEqual(await old.service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1']) }), true)
  const restored = await next.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: first })
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), [2, 3])
  // And an old worker restores a session a new worker persisted (through the relay).
  await next.service.onStateRequest({ op: 'persist', n: '/', session: session('p2', ['sid-p2']) })
  const back = await old.service.onStateRequest({ op: 'restore', n: '/', s: 'p2', o: state.offsetOf(2) })
  assert.deepStrictEqual(back.missed.map(([, data]) => data[1]), [3])
})

test('a restore on the new primary waits while an old worker still holds the socket, until that worker persists it or exits', async () => {
  const old = primary()
  old.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w1', 1) })
  const offset = old.delivered[0].o
  // Held on old worker 101 before the upgrade, on 102 after it (relayed).
  old.notify({ op: 'live', n: '/', s: 'p1', w: 101, x: session('p1', ['sid-p1']) })
  const next = primary()
  upgrade(old, next)
  old.notify({ op: 'live', n: '/', s: 'p2', w: 102, x: session('p2', ['sid-p2', 'r']) })

  let answered
  const restoring = next.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offset }).then((value) => { answered = value })
  await new Promise((resolve) => setImmediate(resolve))
  assert.strictEqual(answered, undefined, 'waits for the old worker')
  old.service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1'], { name: 'p1', late: true }) })
  await restoring
  assert.deepStrictEqual(answered.session.data, { name: 'p1', late: true }, 'the state the old worker persisted')

  // Worker 102 dies without persisting: its last reported state is persisted on the new primary.
  const waiting = next.service.onStateRequest({ op: 'restore', n: '/', s: 'p2', o: offset })
  old.service.forgetProcess(102)
  const fromShadow = await waiting
  assert.deepStrictEqual(fromShadow.session.rooms, ['sid-p2', 'r'])
})

test("with bus.serialization 'advanced' the app's values cross as they were (a Date, a Map)", async () => {
  const old = primary()
  old.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w1', 1) })
  const at = new Date(1700000000000)
  await old.service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1'], { at, seen: new Map([['a', 1]]) }) })
  const next = primary()
  upgrade(old, next, 'advanced')
  const restored = await next.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: old.delivered[0].o })
  assert.ok(restored.session.data.at instanceof Date)
  assert.strictEqual(restored.session.data.at.getTime(), at.getTime())
  assert.deepStrictEqual(restored.session.data.seen, new Map([['a', 1]]))
})

test('a handover cancelled (the new primary failed) leaves the old primary numbering after every offset given meanwhile', () => {
  const old = primary()
  old.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w1', 1) })
  const next = primary()
  const { handover } = upgrade(old, next)
  old.notify({ op: 'pub', n: '/', i: 2, m: broadcast('w1', 2) })
  old.notify({ op: 'pub', n: '/', i: 3, m: broadcast('w1', 3) })
  handover.cancel()
  old.notify({ op: 'pub', n: '/', i: 4, m: broadcast('w1', 4) })
  const offsets = old.delivered.map((m) => m.o)
  assert.strictEqual(new Set(offsets).size, 4, `no offset twice: ${offsets}`)
  assert.strictEqual(offsets[3], old.service.log.namespace('/').offsetOf(4))
})
