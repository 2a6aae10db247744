'use strict'

/**
 * The cluster store across a primary upgrade, through the one mechanism every
 * service's state crosses by (lib/primary/handover.js), in process: the
 * session service of lib/services/list.js in two service hosts joined as the
 * upgrade joins the primaries (test/helpers/handover.js). Every read lease is
 * revoked before the snapshot, so a save a holder answered is in it; from the
 * handover on the old workers' requests are answered by the new primary's
 * store, which revokes a new worker's lease first and grants the old workers
 * none; a failed upgrade gives the old primary its store and its leases back; a
 * rollback to 0.2.0 gets the sessions and the old workers' writes by 0.2.0's messages.
 * The upgrade itself, with real primaries, is in test/upgrade.test.js.
 */

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { sessionService } = require('../lib/session/cluster-service')
const { createServiceHost } = require('../lib/services/host')
const { EventEmitter } = require('events')
const { prepareServices, handOverServices } = require('../lib/primary/handover')
const { joinPrimaries, workerOf, TAG } = require('./helpers/handover')

const EXPIRES = Date.now() + 600000

function sessionPrimary (clusterStore) {
  const config = { clusterStore: Object.assign({ maxSessions: 1000, maxTotalBytes: 1 << 20, leaseMs: 5000 }, clusterStore) }
  return createServiceHost([sessionService], { config })
}

/** A worker reads `sid` under a lease (granted on its second read in a row: ../lib/session/leases.js). */
async function leased (worker, sid) {
  await worker.call('session', 'get', { op: 'get', sid, lease: 1 })
  return worker.call('session', 'get', { op: 'get', sid, lease: 1 })
}

const revocations = (worker) => worker.pushes.filter((push) => push.m === 'revoke').map((push) => push.d)

test('sessions move whole once every read lease is revoked: a save its holder answered before its revocation is in the snapshot', async () => {
  const old = sessionPrimary()
  const next = sessionPrimary()
  try {
    const holder = workerOf(old, 101)
    assert.equal(await holder.call('session', 'set', { op: 'set', sid: 's', sess: '{"n":1}', expires: EXPIRES }), true)
    const held = await leased(holder, 's')
    assert.ok(Array.isArray(held), 'the holder reads s under a lease')
    const pair = joinPrimaries(old, next)
    let handedOver = false
    const handing = pair.handOver().then(() => { handedOver = true })
    await pair.flush()
    assert.equal(revocations(holder).length, 1, 'the holder is told first')
    assert.equal(handedOver, false, 'no snapshot while the holder may still have answered saves in its pipe')
    // The holder answered n = 2 from its lease; the save travels before its acknowledgement.
    const saved = holder.call('session', 'set', { op: 'set', sid: 's', sess: '{"n":2}', expires: EXPIRES })
    holder.notify('session', 'revoked', [held[2]])
    await handing
    await saved
    await pair.flush()
    const reader = workerOf(next, 201)
    assert.equal(await reader.call('session', 'get', { op: 'get', sid: 's' }), '{"n":2}')
  } finally {
    await old.close()
    await next.close()
  }
})

test("the old workers' requests are answered by the new primary's store, in both directions; a refusal keeps its status", async () => {
  const old = sessionPrimary()
  const next = sessionPrimary({ maxTotalBytes: 300 })
  try {
    const draining = workerOf(old, 101)
    const fresh = workerOf(next, 201)
    const pair = joinPrimaries(old, next)
    await pair.handOver()
    await pair.flush()
    assert.equal(await draining.call('session', 'set', { op: 'set', sid: 'a', sess: '{"n":1}', expires: EXPIRES }), true)
    assert.equal(await fresh.call('session', 'get', { op: 'get', sid: 'a' }), '{"n":1}', "an old worker's save is in the new store when it is answered")
    await fresh.call('session', 'set', { op: 'set', sid: 'a', sess: '{"n":2}', expires: EXPIRES })
    assert.equal(await leased(draining, 'a'), '{"n":2}', 'an old worker reads what a new worker saved, and takes no lease there')
    await assert.rejects(draining.call('session', 'set', { op: 'set', sid: 'b', sess: JSON.stringify({ x: 'x'.repeat(400) }), expires: EXPIRES }), (err) => err.wire.status === 413)
    assert.equal(await draining.call('session', 'length', { op: 'length' }), 1)
    assert.equal(old.get('session').get('a'), null, "the old primary's copy is not written: one store")
  } finally {
    await old.close()
    await next.close()
  }
})

test("the new primary revokes a new worker's lease before it answers an old worker's save", async () => {
  const old = sessionPrimary()
  const next = sessionPrimary()
  try {
    const draining = workerOf(old, 101)
    const holder = workerOf(next, 201)
    const pair = joinPrimaries(old, next)
    await pair.handOver()
    await pair.flush()
    await holder.call('session', 'set', { op: 'set', sid: 's', sess: '{"n":1}', expires: EXPIRES })
    const held = await leased(holder, 's')
    assert.ok(Array.isArray(held), 'the new worker holds s')
    let answered
    const saving = draining.call('session', 'set', { op: 'set', sid: 's', sess: '{"n":2}', expires: EXPIRES, lease: 1 }).then((value) => { answered = value })
    await pair.flush()
    assert.deepEqual(revocations(holder), [['s', held[2]]], 'the holder is told first')
    assert.equal(next.get('session').get('s'), '{"n":1}', 'not applied while the holder may still read its copy')
    assert.equal(answered, undefined)
    holder.notify('session', 'revoked', [held[2]])
    await saving
    assert.equal(next.get('session').get('s'), '{"n":2}')
    assert.equal(answered, true, "no lease for the old primary's worker")
  } finally {
    await old.close()
    await next.close()
  }
})

test('an upgrade that fails: passed requests fail instead of hanging, and the old primary answers from its store with leases again', async () => {
  const old = sessionPrimary()
  const next = sessionPrimary()
  try {
    const draining = workerOf(old, 101)
    await draining.call('session', 'set', { op: 'set', sid: 'a', sess: '{"n":1}', expires: EXPIRES })
    const pair = joinPrimaries(old, next)
    await pair.handOver()
    const pending = draining.call('session', 'get', { op: 'get', sid: 'a' })
    pair.fail()
    await assert.rejects(pending, /went away/)
    const again = await leased(draining, 'a')
    assert.ok(Array.isArray(again), 'a lease again')
    assert.equal(again[0], '{"n":1}')
  } finally {
    await old.close()
    await next.close()
  }
})

test("a rollback to clusterize 0.2.0 (its ready says no handover): the sessions go by 0.2.0's 'sessions', then each write the old workers make by its 'write'; nothing is passed through", async () => {
  const old = sessionPrimary()
  try {
    const draining = workerOf(old, 101)
    await draining.call('session', 'set', { op: 'set', sid: 'a', sess: '{"n":1}', expires: EXPIRES })
    const sent = []
    const child = new EventEmitter()
    child.connected = true
    child.send = (message, done) => { sent.push(JSON.parse(JSON.stringify(message))); if (done) setImmediate(done) }
    const prepared = await prepareServices(old)
    const carried = handOverServices(old, child, TAG, { successor: { node: 'v24.0.0', recovery: 1 } })
    assert.deepEqual(carried.services, [], 'nothing passed through')
    assert.equal(sent.length, 1)
    assert.equal(sent[0][TAG], 'sessions')
    assert.equal(sent[0].entries.length, 1)
    assert.equal(await draining.call('session', 'set', { op: 'set', sid: 'a', sess: '{"n":2}', expires: EXPIRES, lease: 1 }), true, 'answered here')
    assert.equal(await draining.call('session', 'get', { op: 'get', sid: 'a' }), '{"n":2}')
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(sent.slice(1), [{ [TAG]: 'write', msg: { op: 'set', sid: 'a', sess: '{"n":2}', expires: EXPIRES } }], 'the write, as 0.2.0 forwarded it, and no read')
    carried.stop()
    prepared.resume()
    await draining.call('session', 'destroy', { op: 'destroy', sid: 'a' })
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(sent.length, 2, 'no more after stop()')
  } finally {
    await old.close()
  }
})
