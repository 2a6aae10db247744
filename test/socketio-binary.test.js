'use strict'

/**
 * lib/realtime/binary.js: how the socket.io adapter carries binary payloads
 * over the bus, whatever its serialization.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { extractBinaries, restoreBinaries } = require('../lib/realtime/binary')

/** What the other side gets: the message through JSON, binaries put back. */
function roundTrip (message) {
  const { message: stripped, binaries } = extractBinaries(message)
  const wire = JSON.parse(JSON.stringify({ m: stripped, b: binaries }))
  return wire.b ? restoreBinaries(wire.m, wire.b) : wire.m
}

test('Buffers, ArrayBuffers and typed arrays at any depth arrive as Buffers with their bytes; the rest is untouched', () => {
  const bytes = new Uint8Array([1, 2, 3, 4]).subarray(1, 3)
  const message = { data: { packet: { data: ['ev', Buffer.from('hi'), { deep: [bytes, new Uint16Array([258]).buffer] }, 'text', 5, null] } } }
  const got = roundTrip(message)
  const args = got.data.packet.data
  assert.deepStrictEqual([args[0], args[3], args[4], args[5]], ['ev', 'text', 5, null])
  assert.ok(Buffer.isBuffer(args[1]) && args[1].toString() === 'hi')
  assert.deepStrictEqual([...args[2].deep[0]], [2, 3], 'a view carries its own bytes, not its whole buffer')
  assert.strictEqual(args[2].deep[1].length, 2)
  assert.ok(Buffer.isBuffer(message.data.packet.data[1]), 'the sender\'s message is not changed')
})

test('a message without binaries is passed as it is, not copied', () => {
  const message = { a: [1, { b: 'x' }], c: new Date(0) }
  const { message: same, binaries } = extractBinaries(message)
  assert.strictEqual(same, message)
  assert.strictEqual(binaries, null)
})

test('hostile or broken attachments: a __proto__ key stays an own property, bad paths are dropped', () => {
  const message = JSON.parse('{"__proto__": {"x": null}}')
  message.__proto__.x = Buffer.from('p') // eslint-disable-line no-proto
  const got = roundTrip(message)
  assert.strictEqual(Object.getPrototypeOf(got), Object.prototype)
  assert.ok(Buffer.isBuffer(Object.getOwnPropertyDescriptor(got, '__proto__').value.x))
  assert.strictEqual({}.x, undefined, 'no prototype was polluted')
  const target = { a: { b: null } }
  restoreBinaries(target, [[['missing', 'b'], 'AA=='], 'junk', [[], 'AA=='], [['a', 'b'], 42]])
  assert.deepStrictEqual(target, { a: { b: null } })
})
