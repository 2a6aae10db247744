'use strict'

/**
 * Session writes during a primary upgrade (lib/primary/session-forward.js):
 * the old primary answers a write only once the new one confirms it, and
 * the new one applies a forwarded write as any other worker's, revoking a
 * new worker's read lease first. The upgrade itself, with real primaries,
 * is in test/upgrade.test.js.
 */

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { EventEmitter } = require('events')
const { forwardSessionWrites, applyForwardedWrite } = require('../lib/primary/session-forward')
const { SessionBackend } = require('../lib/session/cluster-backend')
const { SessionLeases, answerWithLeases } = require('../lib/session/leases')

const TAG = '$czUpgrade'

/** A stand-in for the new primary's ChildProcess: records what is sent, answers as told. */
function newPrimary () {
  const child = new EventEmitter()
  child.connected = true
  child.sent = []
  child.send = (message, callback) => { child.sent.push(message); process.nextTick(callback, null) }
  return child
}

test('the old primary answers a session write once the new primary confirms it, or once the new one is gone', async () => {
  const backend = new SessionBackend({ sweepIntervalMs: 0 })
  const child = newPrimary()
  const forwarding = forwardSessionWrites(child, backend, TAG)
  try {
    const expires = Date.now() + 60000
    let answered = false
    const saved = backend.dispatch({ op: 'set', sid: 'a', sess: '{"n":1}', expires })
    saved.then(() => { answered = true })
    assert.equal(backend.get('a'), '{"n":1}', 'applied here at once')
    assert.deepEqual(child.sent.map((m) => [m[TAG], m.n, m.msg.sid]), [['write', 1, 'a']])
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(answered, false, 'not answered before the new primary has it')
    child.emit('message', { [TAG]: 'written', n: 1 })
    assert.equal(await saved, true)
    assert.equal(backend.dispatch({ op: 'get', sid: 'a' }), '{"n":1}', 'reads are not forwarded')
    const destroyed = backend.dispatch({ op: 'destroy', sid: 'a' })
    child.emit('disconnect')
    assert.equal(await destroyed, true, 'a new primary that went away is not waited for')
    forwarding.stop()
    assert.equal(backend.onWrite, null)
    assert.equal(backend.dispatch({ op: 'set', sid: 'b', sess: '{}', expires }), true, 'after stop(): answered at once')
  } finally {
    forwarding.stop()
    backend.close()
  }
})

test('the new primary revokes a new worker\'s lease before it applies a forwarded write, then confirms it', async () => {
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
    let confirmed = 0
    applyForwardedWrite(backend, { op: 'set', sid: 's', sess: '{"n":2}', expires, lease: 1 }, () => { confirmed++ })
    assert.deepEqual(pushed, [[NEW_WORKER, ['s', held[2]]]], 'the holder is told first')
    assert.equal(backend.get('s'), '{"n":1}', 'not applied while the holder may still read its copy')
    assert.equal(confirmed, 0)
    leases.acknowledged(NEW_WORKER, [held[2]])
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(backend.get('s'), '{"n":2}')
    assert.equal(confirmed, 1)
    applyForwardedWrite(backend, { op: 'set', sid: 'big', sess: 'x'.repeat(10), expires: 'not a number' }, () => { confirmed++ })
    assert.equal(confirmed, 2, 'a write that is not applied is confirmed all the same (the old primary must not wait on it)')
  } finally {
    leases.close()
    backend.close()
  }
})
