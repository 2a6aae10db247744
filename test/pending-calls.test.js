'use strict'

/**
 * lib/services/pending-calls.js: the ids, timers and single settlement that
 * the worker's service client and the upgrade's pass-through (lib/primary/handover.js) share.
 */

const test = require('node:test')
const assert = require('node:assert')
const { createPendingCalls } = require('../lib/services/pending-calls')

function rejectWith (message) {
  return (call) => call.reject(new Error(message))
}

test('each call gets its own id, is answered once, and a second answer finds nothing', async () => {
  const taken = []
  const pending = createPendingCalls({ onTake: (call) => taken.push(call.name) })
  const sent = []
  const first = pending.add({ name: 'a' }, 10000, rejectWith('timeout'), (id) => sent.push(id))
  const second = pending.add({ name: 'b' }, 10000, rejectWith('timeout'), (id) => sent.push(id))
  assert.deepStrictEqual(sent, [1, 2])
  assert.strictEqual(pending.size, 2)

  pending.take(2).resolve('two')
  assert.strictEqual(pending.take(2), undefined)
  pending.take(1).resolve('one')
  assert.deepStrictEqual(await Promise.all([first, second]), ['one', 'two'])
  assert.deepStrictEqual(taken, ['b', 'a'])
  assert.strictEqual(pending.size, 0)
})

test('a call not answered in time is settled by onTimeout once; its late answer finds nothing', async () => {
  let taken = 0
  const pending = createPendingCalls({ onTake: () => taken++ })
  let id = null
  const call = pending.add({}, 20, rejectWith('no answer in time'), (sentId) => { id = sentId })
  await assert.rejects(call, /no answer in time/)
  assert.strictEqual(pending.take(id), undefined)
  assert.strictEqual(taken, 1)
})

test('failAll settles every waiting call once, and leaves none behind', async () => {
  let taken = 0
  const pending = createPendingCalls({ onTake: () => taken++ })
  const calls = [1, 2, 3].map(() => pending.add({}, 10000, rejectWith('timeout'), () => {}))
  pending.failAll(rejectWith('closed'))
  for (const call of calls) await assert.rejects(call, /closed/)
  assert.strictEqual(pending.size, 0)
  assert.strictEqual(taken, 3)
  pending.failAll(() => assert.fail('nothing is left to fail'))
})

test('with unref, a waiting call does not keep the process alive; without it, it does', () => {
  const unrefed = createPendingCalls({ unref: true })
  const refed = createPendingCalls()
  let unrefTimer = null
  let refTimer = null
  unrefed.add({}, 10000, rejectWith('timeout'), (id) => { unrefTimer = unrefed.take(id).timer }).catch(() => {})
  refed.add({}, 10000, rejectWith('timeout'), (id) => { refTimer = refed.take(id).timer }).catch(() => {})
  assert.strictEqual(unrefTimer.hasRef(), false)
  assert.strictEqual(refTimer.hasRef(), true)
})
