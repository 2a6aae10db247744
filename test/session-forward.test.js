'use strict'

/**
 * The cluster store during a primary upgrade (lib/primary/session-forward.js):
 * from the handover on, the old primary passes every session request of its
 * draining workers to the new primary and answers with the new primary's
 * answer, so both generations of workers read and write one store; the new
 * primary answers them as any worker's, revoking a new worker's read lease
 * first. The upgrade itself, with real primaries, is in test/upgrade.test.js.
 */

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { EventEmitter } = require('events')
const { passSessionRequests, answerPassedRequest } = require('../lib/primary/session-forward')
const { SessionBackend } = require('../lib/session/cluster-backend')
const { SessionLeases, answerWithLeases } = require('../lib/session/leases')

const TAG = '$czUpgrade'

/** The new primary's ChildProcess, as the old primary sees it: answers with a real backend of its own. */
function newPrimary (store) {
  const child = new EventEmitter()
  child.connected = true
  child.sent = []
  child.send = (message, callback) => {
    child.sent.push(message)
    process.nextTick(callback, null)
    if (store && message[TAG] === 'op') answerPassedRequest(store, message.msg, (answer) => setImmediate(() => child.emit('message', Object.assign({ [TAG]: 'answer', n: message.n }, answer))))
  }
  return child
}

test('the old primary answers every session request with the new primary\'s store, in both directions, until stop()', async () => {
  const oldStore = new SessionBackend({ sweepIntervalMs: 0 })
  const newStore = new SessionBackend({ sweepIntervalMs: 0, maxTotalBytes: 100 })
  const child = newPrimary(newStore)
  const passing = passSessionRequests(child, oldStore, TAG)
  try {
    const expires = Date.now() + 60000
    assert.equal(await oldStore.dispatch({ op: 'set', sid: 'a', sess: '{"n":1}', expires }), true)
    assert.equal(newStore.get('a'), '{"n":1}', 'an old worker\'s save is in the new store when it is answered')
    newStore.set('a', '{"n":2}', expires, '')
    assert.equal(await oldStore.dispatch({ op: 'get', sid: 'a' }), '{"n":2}', 'and an old worker reads what a new worker saved')
    await assert.rejects(oldStore.dispatch({ op: 'set', sid: 'b', sess: JSON.stringify({ x: 'x'.repeat(200) }), expires }), (err) => err.status === 413, 'a refusal keeps its status')
    assert.equal(await oldStore.dispatch({ op: 'length' }), 1)
    passing.stop()
    assert.equal(oldStore.forward, null)
    assert.equal(oldStore.dispatch({ op: 'get', sid: 'a' }), null, 'after stop(): its own store again')
  } finally {
    passing.stop()
    oldStore.close()
    newStore.close()
  }
})

test('requests passed to a new primary that goes away, or does not answer, fail instead of hanging', async () => {
  const oldStore = new SessionBackend({ sweepIntervalMs: 0 })
  const child = newPrimary(null)
  const passing = passSessionRequests(child, oldStore, TAG)
  try {
    const pending = oldStore.dispatch({ op: 'get', sid: 'a' })
    child.emit('disconnect')
    await assert.rejects(pending, /went away/)
    child.connected = false
    await assert.rejects(oldStore.dispatch({ op: 'get', sid: 'a' }), /gone/)
  } finally {
    passing.stop()
    oldStore.close()
  }
})

test('the new primary revokes a new worker\'s lease before it answers a passed request', async () => {
  const backend = new SessionBackend({ sweepIntervalMs: 0 })
  const pushed = []
  const leases = new SessionLeases({ leaseMs: 5000, push (pid, method, data) { pushed.push([pid, data]); return true } })
  backend.leases = leases
  const NEW_WORKER = 303
  try {
    const expires = Date.now() + 60000
    answerWithLeases(backend, leases, { op: 'set', sid: 's', sess: '{"n":1}', expires, lease: 1 }, NEW_WORKER)
    const held = answerWithLeases(backend, leases, { op: 'get', sid: 's', lease: 1 }, NEW_WORKER)
    assert.ok(Array.isArray(held), 'the new worker holds s')
    const answers = []
    answerPassedRequest(backend, { op: 'set', sid: 's', sess: '{"n":2}', expires, lease: 1 }, (answer) => answers.push(answer))
    assert.deepEqual(pushed, [[NEW_WORKER, ['s', held[2]]]], 'the holder is told first')
    assert.equal(backend.get('s'), '{"n":1}', 'not applied while the holder may still read its copy')
    leases.acknowledged(NEW_WORKER, [held[2]])
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(backend.get('s'), '{"n":2}')
    assert.deepEqual(answers, [{ ok: true, value: true }], 'no lease for the old primary\'s worker')
  } finally {
    leases.close()
    backend.close()
  }
})
