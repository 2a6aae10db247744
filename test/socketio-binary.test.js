'use strict'

/**
 * lib/realtime/binary.js: how the socket.io adapter carries binary payloads
 * over the bus, whatever its serialization.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { extractBinaries, restoreBinaries, binariesUnder } = require('../lib/realtime/binary')

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

test('restoreBinaries copies what it changes: a shared message (the primary\'s recovery log in one process) keeps its nulls', () => {
  const { message: stripped, binaries } = extractBinaries({ data: { packet: { data: ['ev', Buffer.from('a'), { x: [Buffer.from('b'), 1] }] } }, keep: { same: true } })
  const got = restoreBinaries(stripped, binaries)
  assert.deepStrictEqual(stripped.data.packet.data, ['ev', null, { x: [null, 1] }], 'the given message is unchanged')
  assert.deepStrictEqual(got.data.packet.data.map((v) => Buffer.isBuffer(v) ? v.toString() : v)[1], 'a')
  assert.strictEqual(got.data.packet.data[2].x[0].toString(), 'b')
  assert.strictEqual(got.keep, stripped.keep, 'what holds no binary is shared, not copied')
  assert.strictEqual(restoreBinaries(stripped, undefined), stripped)
})

test('binariesUnder gives the binaries of a part of the message, with paths relative to it (what a recovery log replays)', () => {
  const { message: stripped, binaries } = extractBinaries({ uid: 'u', data: { packet: { data: ['ev', Buffer.from('a'), [Buffer.from('b')]] }, opts: { x: Buffer.from('c') } } })
  const under = binariesUnder(binaries, ['data', 'packet', 'data'])
  assert.deepStrictEqual(under.map(([p]) => p), [[1], [2, 0]])
  const args = restoreBinaries(stripped.data.packet.data, under)
  assert.deepStrictEqual([args[0], args[1].toString(), args[2][0].toString()], ['ev', 'a', 'b'])
  assert.strictEqual(binariesUnder(binaries, ['data', 'other']), undefined)
  assert.strictEqual(binariesUnder(undefined, ['data']), undefined)
  assert.strictEqual(binariesUnder(['junk', [[], 'AA==']], []), undefined, 'malformed entries are left out')
})

test('the primary\'s recovery log (one host) delivers a broadcast\'s binaries with it and replays them with its arguments', () => {
  const { RecoveryService } = require('../lib/realtime/recovery-service')
  const sent = []
  // What it sends its workers (not what it forwards to other hosts).
  const service = new RecoveryService({ broadcast: (topic, data, options) => options.scope === 'host' && sent.push(data) })
  const cluster = { uid: 'u', nsp: '/', type: 3, data: { packet: { type: 2, nsp: '/', data: ['msg', { bin: Buffer.from([1, 2]) }] }, opts: { rooms: [], except: [], flags: {} } } }
  const wire = JSON.parse(JSON.stringify({ op: 'pub', n: '/', i: 1, ...extractBinaries(cluster) }))
  service.onQueueMessage({ op: wire.op, n: wire.n, i: wire.i, m: wire.message, b: wire.binaries }, {})
  assert.strictEqual(sent.length, 1)
  const delivered = restoreBinaries(sent[0].m, sent[0].b)
  assert.deepStrictEqual([...delivered.data.packet.data[1].bin], [1, 2], 'delivered with its binaries')
  service.onQueueMessage({ op: 'pub', n: '/', i: 2, m: Object.assign({}, cluster, { data: Object.assign({}, cluster.data, { packet: { type: 2, nsp: '/', data: ['plain'] } }) }) }, {})
  assert.strictEqual(sent[1].b, undefined, 'a message without binaries carries none')

  service.onStateRequest({ op: 'persist', n: '/', session: { sid: 's', pid: 'p', rooms: ['s'], data: {} } })
  const state = service.namespace('/')
  const { missed } = service.onStateRequest({ op: 'restore', n: '/', s: 'p', o: state.offsetOf(0) })
  assert.strictEqual(missed.length, 2)
  const [, args, binaries] = missed[0]
  assert.deepStrictEqual(args, ['msg', { bin: null }], 'the log keeps the arguments without their binaries')
  assert.deepStrictEqual([...restoreBinaries(args, binaries)[1].bin], [1, 2], 'and replays the binaries beside them')
  assert.strictEqual(missed[1].length, 2, 'a packet without binaries replays as [offset, arguments]')
  service.close()
})
