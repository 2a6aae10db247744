'use strict'

/**
 * The primary's side of socket.io connection-state recovery
 * (lib/realtime/recovery-service.js), in process: offsets, bounds, expiry,
 * and a restore that races the old worker's persist.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { NamespaceState, RecoveryService } = require('../lib/realtime/recovery-service')

const toAll = { rooms: [], except: [] }
const session = (pid, rooms) => ({ sid: 'sid-' + pid, pid, rooms, data: { name: pid } })
/** A broadcast ClusterMessage (socket.io-adapter's), as a worker's doPublish() sends it. */
const broadcast = (uid, packet, opts) => ({ uid, nsp: '/', type: 3, data: { packet, opts } })

test('restore returns the packets after the offset for the session\'s rooms, once', () => {
  const state = new NamespaceState('/')
  const now = Date.now()
  const first = state.append({ data: ['m', 1] }, toAll, now)
  state.append({ data: ['m', 2] }, { rooms: ['a'], except: [] }, now)
  state.append({ data: ['m', 3] }, { rooms: ['b'], except: [] }, now)
  state.append({ data: ['m', 4] }, { rooms: [], except: ['a'] }, now)
  state.append({ data: ['m', 5] }, toAll, now)
  state.persist(session('p1', ['sid-p1', 'a']), now)
  const restored = state.restore('p1', first, now)
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), [2, 5])
  assert.deepStrictEqual(restored.session.rooms, ['sid-p1', 'a'])
  assert.strictEqual(restored.head, 5)
  assert.strictEqual(state.restore('p1', first, now), null, 'a session restores once')
})

test('an offset from another primary, from the future, or older than the log is not recovered', () => {
  const state = new NamespaceState('/')
  state.maxPackets = 3
  const now = Date.now()
  const offsets = []
  for (let i = 1; i <= 6; i++) offsets.push(state.append({ data: ['m', i] }, toAll, now))
  assert.strictEqual(state.size, 3, 'at most maxPackets kept')
  const other = new NamespaceState('/')
  for (const offset of [offsets[1], other.offsetOf(5), state.offsetOf(99), 'garbage', undefined]) {
    state.persist(session('p', ['sid-p']), now)
    assert.strictEqual(state.restore('p', offset, now), null, `offset ${offset}`)
  }
  // The packet right after offsets[2] (4) is still kept: recovered.
  state.persist(session('p', ['sid-p']), now)
  assert.deepStrictEqual(state.restore('p', offsets[2], now).missed.map(([seq]) => seq), [4, 5, 6])
})

test('packets and sessions expire after maxDisconnectionDuration; sessions are bounded by maxSessions', () => {
  const state = new NamespaceState('/')
  state.maxDisconnectionDuration = 1000
  state.maxSessions = 2
  const t0 = Date.now()
  const offset = state.append({ data: ['m', 1] }, toAll, t0)
  state.persist(session('old', ['sid-old']), t0)
  state.append({ data: ['m', 2] }, toAll, t0 + 2000)
  assert.strictEqual(state.size, 1, 'the old packet expired')
  assert.strictEqual(state.sessions.size, 0, 'the old session expired')
  for (const pid of ['x', 'y', 'z']) state.persist(session(pid, []), t0 + 2000)
  assert.deepStrictEqual([...state.sessions.keys()], ['y', 'z'], 'the oldest session goes first')
  // Packet 1 expired, but the client had it (its offset): what follows is all there.
  assert.deepStrictEqual(state.restore('y', offset, t0 + 2000).missed.map(([seq]) => seq), [2])
  state.append({ data: ['m', 3] }, toAll, t0 + 4000)
  assert.strictEqual(state.restore('z', offset, t0 + 4000), null, 'packet 2 expired: offset 1 is too old (and so is the session)')
})

test('a restore that arrives before the old worker persisted the socket waits for it (bounded)', async () => {
  const sent = []
  const service = new RecoveryService({ broadcast: (topic, data, options) => sent.push({ topic, data, options }) })
  service.onQueueMessage({ op: 'cfg', n: '/', d: 60000, l: 5000 }, {})
  service.onQueueMessage({ op: 'live', n: '/', s: 'p1', w: 111 }, {})
  service.onQueueMessage({ op: 'pub', n: '/', m: broadcast('u', { type: 2, data: ['m', 1] }, toAll) }, {})
  const offset = sent[0].data.o
  assert.strictEqual(sent[0].options.scope, 'host')
  assert.strictEqual(sent[1].options.scope, 'remote', 'forwarded to the other hosts to number')
  service.onQueueMessage({ op: 'pub', n: '/', m: broadcast('u', { type: 2, data: ['m', 2] }, toAll) }, {})
  const pending = service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offset })
  assert.ok(pending instanceof Promise, 'waits: p1 is still connected on its old worker')
  service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1']) })
  const restored = await pending
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), [2])

  // A socket whose worker exits without persisting it: the wait ends at once.
  service.onQueueMessage({ op: 'live', n: '/', s: 'p2', w: 222 }, {})
  const gone = service.onStateRequest({ op: 'restore', n: '/', s: 'p2', o: offset })
  service.forgetProcess(222)
  assert.strictEqual(await gone, null)
  // A packet from another host is numbered here and not sent back over Redis.
  sent.length = 0
  service.onQueueMessage({ op: 'pub', n: '/', m: broadcast('v', { type: 2, data: ['m', 3] }, toAll) }, { host: 'other' })
  assert.deepStrictEqual(sent.map((s) => s.options.scope), ['host'])
  assert.deepStrictEqual(service.stats(), { namespaces: 1, packets: 3, sessions: 0, sessionsDropped: 0, live: 0 })
})

test("a restore waits for a draining old worker past liveWaitMs (it persists or exits); for a serving one, liveWaitMs bounds the wait", async () => {
  const { setTimeout: sleep } = require('timers/promises')
  const keepAlive = setInterval(() => {}, 1000) // the service's timers are unref'd
  try {
    const sent = []
    const draining = new Set([111])
    const service = new RecoveryService({ broadcast: (topic, data) => sent.push(data) }, { isRetiring: (pid) => draining.has(pid), retireWaitMs: 60000 })
    service.onQueueMessage({ op: 'cfg', n: '/', d: 60000, l: 0 }, {})
    service.onQueueMessage({ op: 'live', n: '/', s: 'p1', w: 111 }, {})
    service.onQueueMessage({ op: 'live', n: '/', s: 'p2', w: 222 }, {})
    service.onQueueMessage({ op: 'pub', n: '/', m: broadcast('u', { type: 2, data: ['m', 1] }, toAll) }, {})
    const offset = sent[0].o
    service.onQueueMessage({ op: 'pub', n: '/', m: broadcast('u', { type: 2, data: ['m', 2] }, toAll) }, {})

    const onDraining = service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offset })
    const onServing = service.onStateRequest({ op: 'restore', n: '/', s: 'p2', o: offset })
    // liveWaitMs is 0: the serving worker's socket is given up on at once...
    assert.strictEqual(await onServing, null, 'a socket its serving worker still holds: a new socket after liveWaitMs')
    await sleep(20)
    // ...while the draining worker's persist, however late, is still waited for.
    service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1']) })
    const restored = await onDraining
    assert.ok(restored, 'recovered: the restore waited for the draining worker')
    assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), [2])
    await service.close()
  } finally {
    clearInterval(keepAlive)
  }
})


test('a worker that dies holding sockets: the primary persists the state it last reported of each, and wakes the restores waiting for them', async () => {
  const sent = []
  const service = new RecoveryService({ broadcast: (topic, data) => sent.push(data) })
  service.onQueueMessage({ op: 'cfg', n: '/', d: 1000, l: 5000 }, {})
  // p1 connects, then joins room 'later' (a second report); p2 never reports its state; p3 disconnects for good.
  service.onQueueMessage({ op: 'live', n: '/', s: 'p1', w: 111, x: session('p1', ['sid-p1']) }, {})
  service.onQueueMessage({ op: 'live', n: '/', s: 'p1', w: 111, x: session('p1', ['sid-p1', 'later']) }, {})
  service.onQueueMessage({ op: 'live', n: '/', s: 'p2', w: 111 }, {})
  service.onQueueMessage({ op: 'live', n: '/', s: 'p3', w: 111, x: session('p3', ['sid-p3']) }, {})
  service.onQueueMessage({ op: 'gone', n: '/', s: 'p3' }, {})
  // A state that is not a session of that socket is ignored.
  service.onQueueMessage({ op: 'live', n: '/', s: 'p4', w: 111, x: { sid: 'x', pid: 'other', rooms: [] } }, {})
  service.onQueueMessage({ op: 'pub', n: '/', m: broadcast('u', { type: 2, data: ['m', 1] }, toAll) }, {})
  const offset = sent[0].o
  service.onQueueMessage({ op: 'pub', n: '/', m: broadcast('u', { type: 2, data: ['m', 2] }, { rooms: ['later'], except: [] }) }, {})

  const waiting = service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offset })
  assert.ok(waiting instanceof Promise, 'p1 is still live on its worker: the restore waits')
  service.forgetProcess(111) // kill -9: nothing was persisted by the worker
  const restored = await waiting
  assert.deepStrictEqual(restored.session, session('p1', ['sid-p1', 'later']), 'the last reported state')
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), [2], 'the packet for its later room')
  for (const pid of ['p2', 'p3', 'p4']) assert.strictEqual(await service.onStateRequest({ op: 'restore', n: '/', s: pid, o: offset }), null, pid)
  assert.strictEqual(service.stats().live, 0, 'nothing held for sockets no longer live')

  // A session of a dead worker whose client never comes back expires with maxDisconnectionDuration.
  service.onQueueMessage({ op: 'live', n: '/', s: 'p5', w: 222, x: session('p5', ['sid-p5']) }, {})
  service.forgetProcess(222)
  assert.strictEqual(service.stats().sessions, 1)
  service.sweep(Date.now() + 2000)
  assert.strictEqual(service.stats().sessions, 0, 'expired')
  await service.close()
})

/** What ClusterAdapter#broadcast does with doPublish()'s promise: deliver (to `log`) a few microtasks after it resolves. */
async function publishAndDeliver (log, name, offset) {
  const published = async () => offset
  log.push(`${name} delivered at ${await published()}`)
}

test('delivery order in a worker: a task queued behind a settling one runs after the continuations of the promise it resolved', async () => {
  const { createDeliveryOrder } = require('../lib/realtime/recovery-order')
  const order = createDeliveryOrder()
  const log = []
  let settle
  const own = publishAndDeliver(log, 'own', new Promise((resolve) => { settle = resolve }).then((o) => o))
  // One IPC batch: the own packet's copy (offset 1), then a remote packet (offset 2), synchronously.
  order.run(() => settle(1), true)
  order.run(() => log.push('remote delivered at 2'))
  await own
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepStrictEqual(log, ['own delivered at 1', 'remote delivered at 2'])
  order.close()
})

test('delivery order in a worker: own broadcasts settled one after another are delivered in one turn, in order, and a remote packet after them still waits for their continuations', async () => {
  const { createDeliveryOrder, HOLD } = require('../lib/realtime/recovery-order')
  const order = createDeliveryOrder()
  const log = []
  const settles = []
  const owns = [1, 2, 3].map((n) => publishAndDeliver(log, `own ${n}`, new Promise((resolve) => { settles.push(resolve) }).then((o) => o)))
  // One IPC batch: three own copies (offsets 1-3), then a remote packet (offset 4).
  for (let i = 0; i < 3; i++) order.run(() => settles[i](i + 1), HOLD.OWN)
  order.run(() => log.push('remote delivered at 4'))
  // Microtasks only: no timer or setImmediate can run between these awaits.
  for (let i = 0; i < 20; i++) await null
  assert.deepStrictEqual(log, ['own 1 delivered at 1', 'own 2 delivered at 2', 'own 3 delivered at 3'], 'all three in this turn, before the remote one')
  await Promise.all(owns)
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepStrictEqual(log.slice(3), ['remote delivered at 4'])
  // A restore's settle holds even an own settle behind it until the next turn.
  order.run(() => log.push('restore settled'), HOLD.STRICT)
  order.run(() => log.push('own 5 settled'), HOLD.OWN)
  assert.deepStrictEqual(log.slice(4), ['restore settled'])
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepStrictEqual(log.slice(4), ['restore settled', 'own 5 settled'])
  order.close()
})
