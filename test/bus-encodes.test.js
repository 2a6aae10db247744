'use strict'

/**
 * How many times a library message (the socket.io adapter's cluster
 * messages, recovery's numbered deliveries) is JSON-encoded and decoded on
 * each hop, counted over in-process bus cores and instrumented peers (as in
 * test/ipc.test.js). The IPC channel's own JSON.stringify/JSON.parse (what
 * Node does in process.send with serialization 'json') is played by wire():
 * it counts like any other call. A call counts when its text holds the
 * payload's marker.
 *
 * These document the counts as they are, not a goal: a library message
 * travels as the bus codec's string inside the IPC envelope, so the sending
 * worker encodes it twice (the codec, then the channel escapes the string)
 * and each receiver decodes it twice, while the primary passes the string
 * through. Carrying the object itself (one encode per hop) was built and
 * measured slower on the sender and in the primary (bench/bus-envelopes.js);
 * see the hops in lib/realtime/socket-io-adapter.js. A change that adds an
 * encode or a decode on a hop fails here.
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

test('an io.emit without recovery: worker -> primary -> each other worker: 2 encodes by the sender, the string passed through by the primary, 2 decodes by each receiver', () => {
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

  assert.strictEqual(senderHop.encodes, 2, 'worker -> primary: the bus codec, then the IPC channel')
  assert.strictEqual(primaryHop.decodes, 1, 'worker -> primary: the IPC channel only (the payload stays a string)')
  assert.strictEqual(primaryHop.encodes, 2, 'primary -> each of 2 workers: the IPC channel, once per hop')
  assert.deepStrictEqual(receiverHops.map((hop) => hop.decodes), [2, 2], 'primary -> worker: the IPC channel, then the bus codec')
})

test('an io.emit with recovery: worker -> primary (pub) -> numbered copies to every worker; nothing is encoded for other hosts without bus.redis', async () => {
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

    assert.strictEqual(senderHop.encodes, 2, 'worker -> primary: the bus codec (app data), then the IPC channel')
    assert.strictEqual(primaryHop.decodes, 2, 'worker -> primary: the IPC channel, then the bus codec (the log needs the packet)')
    assert.strictEqual(primaryHop.encodes, 3, 'primary -> 2 workers: the numbered copy once by the bus codec, then the IPC channel once per worker; nothing for the other hosts')
    assert.deepStrictEqual(receiverHops.map((hop) => hop.decodes), [2, 2], 'primary -> worker: the IPC channel, then the bus codec')
  } finally {
    await host.close()
    await services.closeServices()
  }
})
