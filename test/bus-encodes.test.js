'use strict'

/**
 * How many times a library message (the socket.io adapter's cluster
 * messages, recovery's numbered deliveries) is JSON-encoded and decoded on
 * each hop, counted over in-process bus cores and instrumented peers (as in
 * test/ipc.test.js). The IPC channel's own JSON.stringify/JSON.parse (what
 * Node does in process.send with serialization 'json') is played by wire():
 * it counts like any other call. A call counts when its text holds the
 * payload's marker. One hop: one encode (the IPC channel's) and one decode.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const ipc = require('../lib/ipc')
const { BusCore } = require('../lib/bus/core')
const { createCodec, LIBRARY_MARK } = require('../lib/bus/codec')
const { createWorkerTransport } = require('../lib/bus/worker')
const { createPrimaryTransport } = require('../lib/bus/primary')
const { busRuntime } = require('../lib/bus/runtime')
const { libraryChannel } = require('../lib/bus/library')
const { WorkerRecord } = require('../lib/primary/worker-record')
const services = require('../lib/services')
const { createServiceHost } = require('../lib/services/host')
const { recoveryService, NAMESPACE_TOPIC_PREFIX } = require('../lib/realtime/recovery-service')
const { DEFAULTS } = require('../lib/config')

const MARK = 'enc-mark-7c1'

function instrumentedPeer () {
  const writes = []
  return { writes, connected: true, send (message, callback) { writes.push(message); process.nextTick(callback, null); return true } }
}

function readyRecord (id) {
  const record = new WorkerRecord(id, Object.assign(instrumentedPeer(), { process: { pid: 100 + id } }), 1, 0)
  record.markReady(null)
  return record
}

const newCore = () => Object.assign(new BusCore(), { codec: createCodec({}) })

/** Counts JSON.stringify calls whose output, and JSON.parse calls whose input, hold MARK. */
function counting (fn) {
  const stringify = JSON.stringify
  const parse = JSON.parse
  const counts = { encodes: 0, decodes: 0 }
  JSON.stringify = function countedStringify (...args) {
    const text = stringify.apply(JSON, args)
    if (typeof text === 'string' && text.includes(MARK)) counts.encodes++
    return text
  }
  JSON.parse = function countedParse (text, reviver) {
    if (typeof text === 'string' && text.includes(MARK)) counts.decodes++
    return parse.call(JSON, text, reviver)
  }
  try {
    fn()
  } finally {
    JSON.stringify = stringify
    JSON.parse = parse
  }
  return counts
}

/** What Node's IPC channel does with a message in 'json' mode: one encode on one side, one decode on the other. */
const encodeForWire = (message) => JSON.stringify(message)
const decodeFromWire = (line) => JSON.parse(line)

/** A ClusterMessage as socket.io-adapter's ClusterAdapter builds one for io.emit('news', ...). */
function clusterMessage (uid) {
  return {
    uid,
    nsp: '/',
    type: 3,
    data: {
      packet: { type: 2, nsp: '/', data: ['news', { text: MARK, n: 1, list: [1, 2, 3], quote: 'she said "hi"' }] },
      opts: { rooms: [], except: [], flags: {} }
    }
  }
}

function receivers (count) {
  const out = []
  for (let id = 1; id <= count; id++) {
    const core = newCore()
    const transport = createWorkerTransport(core, { channel: new ipc.Channel(instrumentedPeer()), id, generation: 1 })
    const got = []
    core.addListener(LIBRARY_MARK + NAMESPACE_TOPIC_PREFIX + '/', (data) => got.push(data), false, 'test')
    out.push({ id, core, transport, got })
  }
  return out
}

function withTransport (transport, fn) {
  const core = busRuntime.core
  const saved = core.transport
  core.transport = transport
  try {
    return fn()
  } finally {
    core.transport = saved
  }
}

test('an io.emit without recovery: worker -> primary -> each other worker, one JSON encode and one decode per hop', () => {
  const topic = NAMESPACE_TOPIC_PREFIX + '/'
  // The sending worker: the adapter's doPublish() is a library broadcast of { t: 'm', m }.
  const toPrimary = instrumentedPeer()
  const sender = createWorkerTransport(busRuntime.core, { channel: new ipc.Channel(toPrimary), id: 0, generation: 1 })
  let line
  const senderHop = counting(() => {
    withTransport(sender, () => libraryChannel.broadcast(topic, { t: 'm', m: clusterMessage('sender') }))
    assert.strictEqual(toPrimary.writes.length, 1)
    line = encodeForWire(toPrimary.writes[0])
  })

  const primary = createPrimaryTransport(newCore())
  const records = [0, 1, 2].map(readyRecord)
  for (const record of records) primary.addWorker(record)
  const lines = []
  const primaryHop = counting(() => {
    primary.onWorkerMessage(records[0], decodeFromWire(line))
    for (const record of records.slice(1)) {
      assert.strictEqual(record.channel.peer.writes.length, 1, `relayed to worker ${record.id}`)
      lines.push(encodeForWire(record.channel.peer.writes[0]))
    }
  })

  const workers = receivers(2)
  const receiverHops = workers.map((worker, i) => counting(() => worker.transport.onPrimaryMessage(decodeFromWire(lines[i]))))
  for (const worker of workers) {
    assert.strictEqual(worker.got.length, 1, `worker ${worker.id} got the message`)
    assert.deepStrictEqual(worker.got[0], { t: 'm', m: clusterMessage('sender') })
  }

  assert.strictEqual(senderHop.encodes, 1, 'worker -> primary: encoded once (by the IPC channel)')
  assert.strictEqual(primaryHop.decodes, 1, 'worker -> primary: decoded once (by the IPC channel)')
  assert.strictEqual(primaryHop.encodes, 2, 'primary -> each of 2 workers: encoded once per hop')
  assert.deepStrictEqual(receiverHops.map((hop) => hop.decodes), [1, 1], 'primary -> worker: decoded once')
})

test('an io.emit with recovery: worker -> primary (pub) -> numbered copies to every worker, one JSON encode and one decode per hop', async () => {
  const toPrimary = instrumentedPeer()
  const channel = new ipc.Channel(toPrimary)
  services.attachToPrimary({ channel, maxQueuedBytes: DEFAULTS.bus.maxQueuedBytes })
  const sender = createWorkerTransport(busRuntime.core, { channel, id: 0, generation: 1 })
  const client = services.serviceClient('recovery')
  let line
  // What socket-io-recovery.js's publish() sends: the ClusterMessage as app data.
  const senderHop = counting(() => {
    withTransport(sender, () => client.notify('pub', { op: 'pub', n: '/', i: 1, m: clusterMessage('sender') }, { encode: true }))
    assert.strictEqual(toPrimary.writes.length, 1)
    line = encodeForWire(toPrimary.writes[0])
  })

  const primary = createPrimaryTransport(busRuntime.core)
  const records = [0, 1].map(readyRecord)
  for (const record of records) primary.addWorker(record)
  const host = createServiceHost([recoveryService], { config: DEFAULTS })
  for (const record of records) host.addWorker(record)
  const lines = []
  try {
    const primaryHop = counting(() => {
      withTransport(primary, () => host.onWorkerMessage(records[0], decodeFromWire(line)))
      for (const record of records) {
        assert.strictEqual(record.channel.peer.writes.length, 1, `a numbered copy to worker ${record.id} (the sender too: its offset)`)
        lines.push(encodeForWire(record.channel.peer.writes[0]))
      }
    })

    const workers = receivers(2)
    const receiverHops = workers.map((worker, i) => counting(() => worker.transport.onPrimaryMessage(decodeFromWire(lines[i]))))
    for (const worker of workers) {
      assert.strictEqual(worker.got.length, 1, `worker ${worker.id} got the numbered copy`)
      assert.deepStrictEqual(worker.got[0].m, clusterMessage('sender'))
      assert.strictEqual(worker.got[0].i, 1)
      assert.match(worker.got[0].o, /^[\w-]+:1$/)
    }

    assert.strictEqual(senderHop.encodes, 1, 'worker -> primary: encoded once (by the IPC channel)')
    assert.strictEqual(primaryHop.decodes, 1, 'worker -> primary: decoded once (by the IPC channel)')
    assert.strictEqual(primaryHop.encodes, 2, 'primary -> each of 2 workers: encoded once per hop (nothing for the other hosts without bus.redis)')
    assert.deepStrictEqual(receiverHops.map((hop) => hop.decodes), [1, 1], 'primary -> worker: decoded once')
  } finally {
    await host.close()
    await services.closeServices()
  }
})

test("a library message is checked as the bus codec checks an app's: the same refusals, and its exact JSON size against bus.maxMessageBytes", () => {
  const codec = createCodec({ maxMessageBytes: 200 })
  const cyclic = {}
  cyclic.self = cyclic
  const refused = [{ f () {} }, { m: new Map() }, { n: NaN }, { b: 1n }, 1n, cyclic, Symbol('s'), { s: 'x'.repeat(300) }, { bad: { toJSON () { throw new Error('no') } } }]
  for (const value of refused) {
    const expected = captured(() => codec.encode('t', value))
    assert.ok(expected && expected.code, 'the app codec refuses it too')
    const got = captured(() => codec.encodeLibrary('t', value))
    assert.ok(got, `encodeLibrary() refuses ${String(value && typeof value === 'object' ? Object.keys(value) : typeof value)}`)
    assert.strictEqual(got.code, expected.code)
    assert.strictEqual(got.message, expected.message)
  }
  const values = [null, 0, -1.5e-7, true, 'quote " backslash \\ newline \n ctrl \u0001', 'é € 😀 lone \ud800', [undefined, null, [1, [2]]],
    { a: undefined, 'k"y': false, d: new Date(0), buf: Buffer.from('hi'), nested: { list: [{}, []] } }]
  for (const value of values) {
    const { payload, bytes } = codec.encodeLibrary('t', value)
    assert.strictEqual(payload, value, 'travels as it is')
    assert.strictEqual(bytes, Buffer.byteLength(JSON.stringify(value)), `size of ${JSON.stringify(value)}`)
  }
  // At the limit exactly: accepted; one byte over: refused, naming the size.
  const atLimit = { s: 'x'.repeat(200 - Buffer.byteLength('{"s":""}')) }
  assert.strictEqual(codec.encodeLibrary('t', atLimit).bytes, 200)
  atLimit.s += 'é'
  assert.throws(() => codec.encodeLibrary('t', atLimit), /is 202 bytes once serialised, over the limit of 200 bytes \(option bus\.maxMessageBytes\)/)
})

function captured (fn) {
  try {
    fn()
  } catch (err) {
    return err
  }
  return null
}

test("a library message is encoded by the IPC channel before the call returns, even while the channel is busy: what the app changes after io.emit() does not travel", async () => {
  // Like Node's IPC channel: the message is encoded inside send().
  const lines = []
  const peer = { connected: true, send (message, callback) { lines.push(JSON.stringify(message)); process.nextTick(callback, null); return true } }
  const channel = new ipc.Channel(peer)
  const sender = createWorkerTransport(busRuntime.core, { channel, id: 0, generation: 1 })
  services.attachToPrimary({ channel, maxQueuedBytes: DEFAULTS.bus.maxQueuedBytes })
  const client = services.serviceClient('recovery')
  const state = { count: 1 }
  try {
    withTransport(sender, () => {
      libraryChannel.broadcast('sio:/', { t: 'm', m: { args: [state] } })
      state.count = 2 // the channel now has a write outstanding: the next ones would be queued
      libraryChannel.broadcast('sio:/', { t: 'm', m: { args: [state] } })
      state.count = 3
      client.notify('pub', { op: 'pub', n: '/', i: 1, m: { args: [state] } }, { encode: true })
      state.count = 4
    })
    const counts = lines.flatMap((line) => {
      const message = JSON.parse(line)
      const items = message.kind === 'batch' ? message.items : [message]
      return items.map((item) => item.op === 'B' ? item.m[1].m.args[0].count : item.d.m.args[0].count)
    })
    assert.deepStrictEqual(counts, [1, 2, 3], 'each as it was when sent')
  } finally {
    await services.closeServices()
  }
})
