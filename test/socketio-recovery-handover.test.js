'use strict'

/**
 * The socket.io recovery state across a primary upgrade, through the one
 * mechanism every service's state crosses by (lib/primary/handover.js with
 * lib/realtime/recovery-handover.js), in process: two service hosts joined as
 * the upgrade joins the primaries (test/helpers/handover.js), workers as
 * records on them. The cluster-level proof is test/upgrade-socketio.test.js;
 * this one pins the rules: offsets go on from the old ones, sessions keep their
 * expiry, the old workers' broadcasts are numbered in the one sequence and
 * sent down, a restore on the new primary waits for an old worker's persist,
 * app values survive with bus.serialization 'advanced', and a failed upgrade
 * never gives an offset twice.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { RecoveryService, recoveryHandlers, recoveryService } = require('../lib/realtime/recovery-service')
const { createServiceHost } = require('../lib/services/host')
const { BATCH } = require('../lib/primary/handover')
const { joinPrimaries, workerOf } = require('./helpers/handover')

const session = (pid, rooms, data) => ({ sid: 'sid-' + pid, pid, rooms, data: data || { name: pid } })
const broadcast = (uid, n) => ({ uid, nsp: '/', type: 3, data: { packet: { type: 2, data: ['msg', n] }, opts: { rooms: [], except: [] } } })

/**
 * A primary's recovery service in a service host; what it delivers to its workers is recorded.
 * @param {{ upgrading?: boolean, serialization?: string }} [options]
 */
function primary (options) {
  const delivered = []
  const service = new RecoveryService({ broadcast: (topic, message) => { if (topic.startsWith('sio:')) delivered.push(message) } }, { serialization: options && options.serialization })
  if (options && options.upgrading) service.hold()
  const host = createServiceHost([{ name: 'recovery', handover: recoveryService.handover, start: () => recoveryHandlers(service) }], {})
  const worker = (pid) => {
    const w = workerOf(host, pid)
    return {
      exit: w.exit,
      notify: (data) => w.notify('recovery', data.op, data),
      request: (data) => w.call('recovery', data.op, data)
    }
  }
  return { service, host, delivered, worker }
}

/** The upgrade: the old primary hands over to a new one (holding until then); both ways copied as JSON. */
async function upgrade (old, next, serialization) {
  const pair = joinPrimaries(old.host, next.host, { serialization })
  await pair.handOver()
  await pair.flush()
  return pair
}

test('offsets go on from the old primary\'s; packets and sessions (with their expiry) move in batches', async () => {
  const old = primary()
  const w1 = old.worker(101)
  const count = BATCH * 2 + 7
  for (let i = 1; i <= count; i++) w1.notify({ op: 'pub', n: '/', i, m: broadcast('w1', i) })
  const offsets = old.delivered.map((m) => m.o)
  for (let i = 0; i < BATCH + 3; i++) old.service.persist('/', session('other-' + i, ['sid-other-' + i]))
  await w1.request({ op: 'persist', n: '/', session: session('p1', ['sid-p1']) })
  const expiresAt = old.service.log.namespace('/').sessions.get('p1').expiresAt

  const next = primary({ upgrading: true })
  const w2 = next.worker(201)
  // A new worker's broadcast before the state came: held, then numbered after the old ones.
  w2.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w2', 'held') })
  assert.strictEqual(next.delivered.length, 0, 'held until the state is taken over')
  await upgrade(old, next)
  const state = next.service.log.namespace('/')
  assert.strictEqual(next.delivered[0].o, state.offsetOf(count + 1), 'numbered after the last old offset')
  assert.strictEqual(state.epoch, old.service.log.namespace('/').epoch)
  assert.strictEqual(state.sessions.get('p1').expiresAt, expiresAt, 'the session keeps its expiry')
  assert.strictEqual(state.sessions.size, BATCH + 4, 'every session, over several batches')
  assert.strictEqual(state.size, count + 1, 'every packet, over several batches (and the held one)')

  const restored = await w2.request({ op: 'restore', n: '/', s: 'p1', o: offsets[count - 3] })
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), [count - 1, count, 'held'])
})

test('after the handover the old workers\' broadcasts are numbered by the new primary and sent down; restores and persists go there too', async () => {
  const old = primary()
  const w1 = old.worker(101)
  w1.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w1', 1) })
  const first = old.delivered[0].o
  const next = primary({ upgrading: true })
  const w2 = next.worker(201)
  const pair = await upgrade(old, next)
  w1.notify({ op: 'pub', n: '/', i: 2, m: broadcast('w1', 2) })
  await pair.flush()
  w2.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w2', 3) })
  await pair.flush()
  const state = next.service.log.namespace('/')
  // One sequence for both sets of workers, each packet on both sides, in that order.
  assert.deepStrictEqual(next.delivered.map((m) => m.o), [state.offsetOf(2), state.offsetOf(3)])
  assert.deepStrictEqual(old.delivered.map((m) => [m.o, m.i, m.m.uid]), [[first, 1, 'w1'], [state.offsetOf(2), 2, 'w1'], [state.offsetOf(3), 1, 'w2']])
  assert.strictEqual(old.service.log.namespace('/').seq, 3, 'kept on the old side too')

  // An old worker persists (passed on); a new worker restores it.
  assert.strictEqual(await w1.request({ op: 'persist', n: '/', session: session('p1', ['sid-p1']) }), true)
  const restored = await w2.request({ op: 'restore', n: '/', s: 'p1', o: first })
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), [2, 3])
  // And an old worker restores a session a new worker persisted (answered by the new primary).
  await w2.request({ op: 'persist', n: '/', session: session('p2', ['sid-p2']) })
  const back = await w1.request({ op: 'restore', n: '/', s: 'p2', o: state.offsetOf(2) })
  assert.deepStrictEqual(back.missed.map(([, data]) => data[1]), [3])
})

test('a restore on the new primary waits while an old worker still holds the socket, until that worker persists it or exits', async () => {
  const old = primary()
  const w1 = old.worker(101)
  const w3 = old.worker(102)
  w1.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w1', 1) })
  const offset = old.delivered[0].o
  // Held on old worker 101 before the upgrade, on 102 after it (passed on).
  w1.notify({ op: 'live', n: '/', s: 'p1', w: 101, x: session('p1', ['sid-p1']) })
  const next = primary({ upgrading: true })
  const w2 = next.worker(201)
  const pair = await upgrade(old, next)
  w3.notify({ op: 'live', n: '/', s: 'p2', w: 102, x: session('p2', ['sid-p2', 'r']) })
  await pair.flush()

  let answered
  const restoring = w2.request({ op: 'restore', n: '/', s: 'p1', o: offset }).then((value) => { answered = value })
  await pair.flush()
  assert.strictEqual(answered, undefined, 'waits for the old worker')
  await w1.request({ op: 'persist', n: '/', session: session('p1', ['sid-p1'], { name: 'p1', late: true }) })
  await restoring
  assert.deepStrictEqual(answered.session.data, { name: 'p1', late: true }, 'the state the old worker persisted')

  // Worker 102 dies without persisting: its last reported state is persisted on the new primary.
  const waiting = w2.request({ op: 'restore', n: '/', s: 'p2', o: offset })
  await pair.flush()
  w3.exit()
  const fromShadow = await waiting
  assert.deepStrictEqual(fromShadow.session.rooms, ['sid-p2', 'r'])
})

test("with bus.serialization 'advanced' the app's values cross as they were (a Date, a Map)", async () => {
  const old = primary({ serialization: 'advanced' })
  const w1 = old.worker(101)
  w1.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w1', 1) })
  const at = new Date(1700000000000)
  await w1.request({ op: 'persist', n: '/', session: session('p1', ['sid-p1'], { at, seen: new Map([['a', 1]]) }) })
  const next = primary({ upgrading: true, serialization: 'advanced' })
  const w2 = next.worker(201)
  const pair = await upgrade(old, next, 'advanced')
  const restored = await w2.request({ op: 'restore', n: '/', s: 'p1', o: old.delivered[0].o })
  assert.ok(restored.session.data.at instanceof Date)
  assert.strictEqual(restored.session.data.at.getTime(), at.getTime())
  assert.deepStrictEqual(restored.session.data.seen, new Map([['a', 1]]))
  // An old worker's values, passed on after the handover, too.
  await w1.request({ op: 'persist', n: '/', session: session('p3', ['sid-p3'], { at }) })
  await pair.flush()
  const passed = await w2.request({ op: 'restore', n: '/', s: 'p3', o: old.delivered[0].o })
  assert.ok(passed.session.data.at instanceof Date, 'a Date persisted by an old worker after the handover')
})

test('an upgrade that fails (the new primary gone before it serves) leaves the old primary numbering after every offset given meanwhile', async () => {
  const old = primary()
  const w1 = old.worker(101)
  w1.notify({ op: 'pub', n: '/', i: 1, m: broadcast('w1', 1) })
  const next = primary({ upgrading: true })
  const pair = await upgrade(old, next)
  w1.notify({ op: 'pub', n: '/', i: 2, m: broadcast('w1', 2) })
  w1.notify({ op: 'pub', n: '/', i: 3, m: broadcast('w1', 3) })
  await pair.flush()
  pair.fail()
  w1.notify({ op: 'pub', n: '/', i: 4, m: broadcast('w1', 4) })
  const offsets = old.delivered.map((m) => m.o)
  assert.strictEqual(offsets.length, 4, `every broadcast delivered once: ${offsets}`)
  assert.strictEqual(new Set(offsets).size, 4, `no offset twice: ${offsets}`)
  assert.strictEqual(offsets[3], old.service.log.namespace('/').offsetOf(4))
})
