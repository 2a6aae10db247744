'use strict'

/**
 * lib/ipc.js and lib/protocol.js against a real child process over a real
 * IPC channel: batching, ordering, foreign messages, a throwing handler, a
 * closed channel, and the routing table.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { fork } = require('child_process')
const path = require('path')
const ipc = require('../lib/ipc')
const protocol = require('../lib/protocol')
const { eventually } = require('./helpers/wait')

const children = []
after(() => { for (const child of children) child.kill('SIGKILL') })

function startChild () {
  const child = fork(path.join(__dirname, 'fixtures/ipc-echo.js'), { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  children.push(child)
  const raw = []
  child.on('message', (message) => raw.push(message))
  return { child, raw }
}

// Bus transports over instrumented peers (no process): a peer whose writes are recorded as they are
// made; completion is reported on the next tick, as Node does for a write the OS took at once.
const { BusCore } = require('../lib/bus/core')
const { createCodec } = require('../lib/bus/codec')
const { createWorkerTransport } = require('../lib/bus/worker')
const { createPrimaryTransport } = require('../lib/bus/primary')
const { WorkerRecord } = require('../lib/primary/worker-record')
const { createRemote } = require('../lib/services/remote')
const { createServiceHost } = require('../lib/services/host')

function instrumentedPeer () {
  const writes = []
  return { writes, connected: true, send (message, callback) { writes.push(message); process.nextTick(callback, null); return true } }
}
/** A ready worker record (as the primary's bus gets them) whose worker is an instrumented peer. */
function readyRecord (id) {
  const record = new WorkerRecord(id, Object.assign(instrumentedPeer(), { process: { pid: 100 + id } }), 1, 0)
  record.markReady(null)
  return record
}
const newCore = () => Object.assign(new BusCore(), { codec: createCodec({}) })
const overTheWire = (message) => JSON.parse(JSON.stringify(message))

test('post() in one tick is one write (a batch); listen() unpacks it in order', async () => {
  const { child, raw } = startChild()
  const channel = new ipc.Channel(child)
  for (let i = 0; i < 5; i++) channel.post(ipc.envelope('n', { i }))
  await eventually(() => raw.length >= 1)
  assert.strictEqual(raw.length, 1, 'five posts, one write')
  const batch = raw[0].raw
  assert.strictEqual(batch.kind, 'batch')
  assert.deepStrictEqual(batch.items.map((m) => m.i), [0, 1, 2, 3, 4])
})

test('postNow() writes what is queued first, then itself: order is kept', async () => {
  const { child } = startChild()
  const received = []
  ipc.listen(child, (message) => received.push(message.kind === 'item' ? message.i : message.kind))
  child.send({ cmd: 'post-burst', count: 3 })
  await eventually(() => received.length === 4)
  assert.deepStrictEqual(received, [0, 1, 2, 'urgent'])
})

test('listen() ignores foreign messages and survives a throwing handler', async () => {
  const { child } = startChild()
  const kinds = []
  ipc.listen(child, (message) => {
    if (message.kind === 'boom') throw new Error('handler bug')
    kinds.push(message.kind)
  })
  child.send({ cmd: 'foreign-then-envelope' })
  await eventually(() => kinds.length === 1)
  assert.deepStrictEqual(kinds, ['after-boom'])
})

test('writing to a closed channel returns false and calls back with an error, never throws', async () => {
  const { child } = startChild()
  const channel = new ipc.Channel(child)
  child.disconnect()
  const error = await new Promise((resolve) => {
    assert.strictEqual(channel.postNow(ipc.envelope('late'), undefined, resolve), false)
  })
  assert.match(error.message, /IPC channel closed/)
  assert.doesNotThrow(() => channel.post(ipc.envelope('later')))
})

test('post(message, onWritten): told once the write carrying it completes, not when it is handed over; a closed channel tells the error', async () => {
  const completions = []
  const peer = { connected: true, writes: [], send (message, callback) { this.writes.push(message); completions.push(callback); return true } }
  const channel = new ipc.Channel(peer)
  const told = []
  channel.post(ipc.envelope('a'), (err) => told.push(['a', err]))
  channel.post(ipc.envelope('plain'))
  channel.post(ipc.envelope('b'), (err) => told.push(['b', err]))
  await new Promise((resolve) => setImmediate(resolve))
  assert.strictEqual(peer.writes.length, 1, 'one batch')
  assert.deepStrictEqual(told, [], 'handed to the peer, not yet written')
  completions[0](null)
  assert.deepStrictEqual(told, [['a', null], ['b', null]])
  peer.connected = false
  const failed = new Promise((resolve) => channel.post(ipc.envelope('late'), resolve))
  assert.match((await failed).message, /IPC channel closed/)
})

test('protocol: every kind has one name, builders make envelopes, the router has no default forwarding', () => {
  assert.deepStrictEqual(new Set(Object.values(protocol.KIND)).size, Object.keys(protocol.KIND).length)
  const ready = protocol.ready({ port: 1 })
  assert.ok(ipc.isEnvelope(ready))
  assert.strictEqual(ready.kind, protocol.KIND.READY)
  const fatal = protocol.bootError(Object.assign(new Error('bad export'), { appInvalid: true }))
  assert.strictEqual(fatal.deterministic, true)
  assert.strictEqual(protocol.bootError(new Error('db down')).deterministic, false)

  const seen = []
  const unknown = []
  const route = protocol.createRouter({
    [protocol.KIND.READY]: (context, message) => seen.push([context, message.kind])
  }, (context, message) => unknown.push(message.kind))
  route('w1', ready)
  route('w1', ipc.envelope('constructor'))
  route('w1', ipc.envelope('toString'))
  assert.deepStrictEqual(seen, [['w1', 'ready']])
  assert.deepStrictEqual(unknown, ['constructor', 'toString'])
})

test('a library request (a service call) crosses the channel as plain data: the session string is not wrapped in a second JSON encoding', async () => {
  const { child, raw } = startChild()
  const channel = new ipc.Channel(child)
  const remote = createRemote({ channel, maxQueuedBytes: 1024 * 1024 })
  const core = new BusCore()
  core.codec = createCodec({})
  const transport = createWorkerTransport(core, { channel, id: 0 })
  const sess = JSON.stringify({ cookie: { expires: null }, user: 'ada' })
  remote.request('session', 'set', { op: 'set', sid: 's1', sess }, 1000, sess.length).catch(() => {})
  transport.request('app:topic', core.codec.encode('app:topic', { sess }), 1000).catch(() => {})
  const items = await eventually(() => {
    const all = raw.flatMap((m) => m.raw.kind === 'batch' ? m.raw.items : [m.raw])
    return all.length >= 2 && all
  })
  const call = items.find((m) => m.kind === protocol.KIND.SERVICE)
  const request = items.find((m) => m.kind === protocol.KIND.BUS)
  assert.deepStrictEqual(call.d, { op: 'set', sid: 's1', sess }, 'plain data, encoded only by the channel')
  assert.strictEqual(typeof request.d, 'string', 'ordinary requests are encoded by the codec')
  remote.failAll('test over')
  transport.close()
})

test('postSoon() writes a lone message at once on an idle channel; while a write is outstanding the rest are batched', async () => {
  const { child, raw } = startChild()
  const channel = new ipc.Channel(child)
  channel.postSoon(ipc.envelope('lone', { i: 0 }))
  assert.strictEqual(channel.queue.length, 0, 'written at once, no batch to wait for')
  for (let i = 1; i <= 5; i++) channel.postSoon(ipc.envelope('burst', { i }))
  assert.strictEqual(channel.queue.length, 5, 'queued behind the outstanding write')
  await eventually(() => raw.length >= 2)
  assert.strictEqual(raw[0].raw.kind, 'lone')
  assert.strictEqual(raw[1].raw.kind, 'batch')
  assert.deepStrictEqual(raw[1].raw.items.map((m) => m.i), [1, 2, 3, 4, 5])
})

test('a lone broadcast is written in the same tick at every hop: the sender to the primary, the primary to each other worker, and delivered on arrival', () => {
  const senderCore = newCore()
  const toPrimary = instrumentedPeer()
  const sender = createWorkerTransport(senderCore, { channel: new ipc.Channel(toPrimary), id: 0, generation: 1 })
  sender.broadcast('t', senderCore.codec.encode('t', { n: 1 }))
  assert.strictEqual(toPrimary.writes.length, 1, 'the sender wrote it before broadcast() returned')

  const primary = createPrimaryTransport(newCore())
  const records = [0, 1, 2].map(readyRecord)
  for (const record of records) primary.addWorker(record)
  primary.onWorkerMessage(records[0], overTheWire(toPrimary.writes[0]))
  assert.strictEqual(records[0].channel.peer.writes.length, 0, 'not relayed back to its sender')
  for (const record of records.slice(1)) {
    assert.strictEqual(record.channel.peer.writes.length, 1, `relayed to worker ${record.id} before onWorkerMessage() returned`)
    assert.deepStrictEqual(record.channel.peer.writes[0].m, ['t', '{"n":1}', 0, 1])
  }

  const receiverCore = newCore()
  const receiver = createWorkerTransport(receiverCore, { channel: new ipc.Channel(instrumentedPeer()), id: 1, generation: 1 })
  const got = []
  receiverCore.addListener('t', (data, meta) => got.push([data, meta.from]), false, 'bus.on')
  receiver.onPrimaryMessage(overTheWire(records[1].channel.peer.writes[0]))
  assert.deepStrictEqual(got, [[{ n: 1 }, 0]], 'delivered before onPrimaryMessage() returned')
})

test("library requests (the cluster session store's) made in one loop turn share one IPC write each way; a user's lone request is still written at once", async () => {
  const { setImmediate: turn } = require('timers/promises')
  const unpack = (write) => write.kind === 'batch' ? write.items : [write]

  const workerCore = newCore()
  const toPrimary = instrumentedPeer()
  const channel = new ipc.Channel(toPrimary)
  const worker = createWorkerTransport(workerCore, { channel, id: 0, generation: 1 })
  const remote = createRemote({ channel, maxQueuedBytes: 1024 * 1024 })
  const answers = []
  for (let i = 0; i < 5; i++) answers.push(remote.request('test-store', 'get', { op: 'get', i }, 5000, 32))
  assert.strictEqual(toPrimary.writes.length, 0, 'library requests wait for the end of the loop turn')
  await turn()
  assert.strictEqual(toPrimary.writes.length, 1, 'five library requests, one write')
  const requests = unpack(toPrimary.writes[0])
  assert.strictEqual(requests.length, 5)

  const host = createServiceHost([{ name: 'test-store', start: () => ({ requests: { get: (data) => ({ got: data.i }) } }) }], {})
  const record = readyRecord(0)
  host.addWorker(record)
  for (const request of requests) host.onWorkerMessage(record, overTheWire(request))
  await eventually(() => record.channel.peer.writes.length > 0)
  await turn()
  assert.strictEqual(record.channel.peer.writes.length, 1, 'five answers, one write')
  for (const response of unpack(record.channel.peer.writes[0])) remote.onPrimaryMessage(overTheWire(response))
  assert.deepStrictEqual((await Promise.all(answers)).map((a) => a.got), [0, 1, 2, 3, 4])

  worker.request('user-topic', workerCore.codec.encode('user-topic', { n: 1 }), 5000).catch(() => {})
  assert.strictEqual(toPrimary.writes.length, 2, "a user's lone request is written before request() returns")
})
