'use strict'

/**
 * socket.io connection-state recovery with bus.redis (#12): the log and the
 * sessions live in Redis, so a client cut from one cluster recovers on
 * another cluster sharing the Redis. In process (two primaries' recovery
 * services on the real Redis), then end to end (two real clusters, a real
 * socket.io-client moved from one to the other by a TCP proxy), then with
 * Redis unreachable (broadcasts fall back to the host, logged once).
 * No mocks, no timing thresholds.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const Redis = require('ioredis')
const { io: connectClient } = require('socket.io-client')
const { RecoveryService } = require('../lib/realtime/recovery-service')
const { startCluster } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { RECOVERY_FIXTURE: fixture, recoverySuite, recoveryEnv } = require('./helpers/socketio-recovery')
const { freePort } = require('./helpers/net')
const { createTcpProxy } = require('./helpers/tcp-proxy')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix, privateRedis, redisServerSuite } = require('./helpers/redis')

const { sockets, cleanups } = recoverySuite()

const toAll = { rooms: [], except: [], flags: {} }
const session = (pid, rooms, data) => ({ sid: 'sid-' + pid, pid, rooms, data: data || { name: pid } })
/** A broadcast ClusterMessage (socket.io-adapter's), as a worker's doPublish() sends it. */
const broadcast = (uid, packet, opts) => ({ uid, nsp: '/', type: 3, data: { packet, opts } })

/**
 * A primary's recovery service on the shared Redis (or `url`); `sent` collects what it sends its
 * workers, and what it would forward over the bus bridge (nothing carries that to the other here).
 */
function primary (channel, log, url) {
  const sent = []
  const bus = { broadcast: (topic, data, options) => sent.push({ topic, data, options }) }
  const service = new RecoveryService(bus, { redis: url || REDIS_URL, channel, log })
  cleanups.push(() => service.close())
  return { service, sent, delivered: () => sent.filter((s) => s.data.o !== undefined) }
}

function publish (host, n, opts) {
  host.service.onQueueMessage({ op: 'pub', n: '/', m: broadcast('u', { type: 2, nsp: '/', data: ['m', n] }, opts || toAll) }, {})
}

/** The first packet carrying `tag` that `host` delivered to its workers, if any. */
const deliveredTag = (host, tag) => host.delivered().find((s) => s.data.m.data.packet.data[1] === tag)

/**
 * Two primaries on one stream, both reading everything from a marker packet
 * on (each host reads from where the stream is when it starts).
 * @param {string} label
 * @param {{ url?: string, maxPackets?: number, log?: object }} [options] url: a private Redis (default
 *   the shared one); maxPackets: recovery.maxPackets of namespace '/'; log: A's logger
 * @returns {Promise<{ a: object, b: object, channel: string, marker: string }>} marker: the marker's offset
 */
async function twoPrimaries (label, { url, maxPackets = 1000, log } = {}) {
  const channel = uniquePrefix(label)
  if (url === undefined) cleanups.push(() => deletePrefix('{' + channel))
  const a = primary(channel, log, url)
  const b = primary(channel, undefined, url)
  for (const host of [a, b]) host.service.onQueueMessage({ op: 'cfg', n: '/', d: 60000, p: maxPackets, x: 10, l: 5000 }, {})
  await eventually(() => a.service.stats().redis.ready && b.service.stats().redis.ready, { what: 'both connected to Redis' })
  let probe = 0
  await eventually(() => {
    publish(a, `probe-${++probe}`)
    return b.delivered().some((s) => /^\d+-\d+$/.test(s.data.o))
  }, { what: 'a packet of A read from the stream by B', intervalMs: 100 })
  publish(a, 'marker')
  await eventually(() => deliveredTag(a, 'marker') && deliveredTag(b, 'marker'), { what: 'the marker on both hosts' })
  return { a, b, channel, marker: deliveredTag(a, 'marker').data.o }
}

test('in process: two primaries share one stream (one order) and a session persisted by one restores on the other, once', async (t) => {
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const { a, b, channel } = await twoPrimaries('sio-rec-unit')
  for (const host of [a, b]) host.sent.length = 0

  publish(a, 1)
  publish(b, 2, { rooms: ['r'], except: [], flags: {} })
  publish(a, 3, { rooms: ['other'], except: [], flags: {} })
  publish(b, 4, { rooms: [], except: ['r'], flags: {} })
  publish(a, 5)
  await eventually(() => a.delivered().length === 5 && b.delivered().length === 5, { what: 'five packets on both hosts' })
  const order = (host) => host.delivered().map((s) => [s.data.o, s.data.m.data.packet.data[1]])
  assert.deepStrictEqual(order(a), order(b), 'the same packets, with the same offsets, in the same order on both hosts')
  assert.ok(a.delivered().every((s) => s.options.scope === 'host' && s.data.o === s.data.q && /^\d+-\d+$/.test(s.data.o)), 'offsets are stream ids')
  const offsets = order(a).map(([o]) => o)

  // Cut on A after the first packet of the stream (A's and B's XADDs race: the stream's order is the order);
  // restored on B: the later ones for its rooms: 1, 2 and 5, not 3 (other room) nor 4 (except r).
  assert.strictEqual(await a.service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1', 'r'], { name: 'moving', n: 1 }) }), true)
  const restored = await b.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offsets[0] })
  assert.deepStrictEqual(restored.session.data, { name: 'moving', n: 1 })
  assert.deepStrictEqual(restored.session.rooms, ['sid-p1', 'r'])
  assert.deepStrictEqual(restored.missed, order(a).slice(1).filter(([, n]) => [1, 2, 5].includes(n)).map(([o, n]) => [o, ['m', n]]))
  assert.strictEqual(restored.head, offsets[4])
  assert.strictEqual(await a.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offsets[0] }), null, 'a session restores once, whichever host asks')

  // An offset that is not in the stream (forged, or trimmed) is not recovered.
  await a.service.onStateRequest({ op: 'persist', n: '/', session: session('p2', ['sid-p2']) })
  assert.strictEqual(await b.service.onStateRequest({ op: 'restore', n: '/', s: 'p2', o: '1-0' }), null)

  // A malformed offset restores nothing and leaves the session for a well-formed one.
  await a.service.onStateRequest({ op: 'persist', n: '/', session: session('p3', ['sid-p3']) })
  assert.strictEqual(await b.service.onStateRequest({ op: 'restore', n: '/', s: 'p3', o: 'garbage' }), null)
  assert.deepStrictEqual((await b.service.onStateRequest({ op: 'restore', n: '/', s: 'p3', o: offsets[4] })).missed, [])

  // The keys carry the bus channel as a hash tag (one slot on a Redis Cluster; apps on one Redis apart).
  const redis = new Redis(REDIS_URL)
  cleanups.push(() => redis.quit())
  const keys = (await redis.keys('*' + channel + '*')).sort()
  assert.ok(keys.length > 0 && keys.every((key) => key.startsWith(`{${channel}}:sio:`)), keys.join(', '))
  assert.ok(keys.includes(`{${channel}}:sio:log:/`), 'the stream of namespace /')

  // maxSessions (10): the oldest go first.
  for (let i = 0; i < 12; i++) await a.service.onStateRequest({ op: 'persist', n: '/', session: session('s' + i, []) })
  assert.strictEqual(await redis.zcard(`{${channel}}:sio:idx:/`), 10)
  assert.ok((await redis.pttl(`{${channel}}:sio:idx:/`)) > 0, 'the session index expires')
  assert.strictEqual(await redis.exists(`{${channel}}:sio:s:/:s0`), 0, 'the oldest session was dropped')
  assert.strictEqual(await redis.exists(`{${channel}}:sio:s:/:s11`), 1)
  assert.ok((await redis.pttl(`{${channel}}:sio:s:/:s11`)) > 50000, 'a session expires after maxDisconnectionDuration')
})

test('in process: the sockets of a worker that died without persisting them are persisted in Redis, and restore on another host', async (t) => {
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const { a, b, marker: offset } = await twoPrimaries('sio-rec-crash')

  a.service.onQueueMessage({ op: 'live', n: '/', s: 'p1', w: 111, x: session('p1', ['sid-p1', 'later'], { name: 'crashed' }) }, {})
  publish(a, 'missed', { rooms: ['later'], except: [], flags: {} })
  await eventually(() => deliveredTag(b, 'missed'), { what: 'the missed packet on B' })
  a.service.forgetProcess(111)
  // Persisted asynchronously (a Redis script): B gets it once it is there.
  const restored = await eventually(() => b.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offset }), { what: 'the session restored on B', intervalMs: 50 })
  assert.deepStrictEqual(restored.session, session('p1', ['sid-p1', 'later'], { name: 'crashed' }))
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), ['missed'])
})

const tagsOf = (host) => host.delivered().map((s) => s.data.m.data.packet.data[1])
const isStreamOffset = (offset) => /^\d+-\d+$/.test(offset)

test('in process: Redis restarted empty while A sends: B gets what A numbered meanwhile, and what Redis lost, through the stream, once and in A\'s order', redisServerSuite('the in-process outage test', 60000), async () => {
  const redis = await privateRedis()
  cleanups.push(() => redis.stop())
  await redis.start()
  const { a, b } = await twoPrimaries('sio-rec-catchup', { url: redis.url })
  for (const host of [a, b]) host.sent.length = 0

  for (const tag of ['r1', 'r2', 'r3']) publish(a, tag)
  await eventually(() => deliveredTag(b, 'r3'), { what: 'r3 read by B' })
  await redis.stop()
  await eventually(() => a.service.stats().redis.degraded, { what: 'A sees Redis gone' })
  for (const tag of ['d1', 'd2', 'd3']) publish(a, tag)
  assert.deepStrictEqual(tagsOf(a), ['r1', 'r2', 'r3', 'd1', 'd2', 'd3'], 'A delivers what it numbers meanwhile at once')
  assert.ok(a.delivered().slice(3).every((s) => !isStreamOffset(s.data.o)), 'numbered by A')
  assert.strictEqual(a.service.stats().redis.unsent, 3, 'kept for the stream')
  assert.deepStrictEqual(a.sent.filter((s) => s.options.scope === 'remote'), [], 'nothing of it over the bus bridge')

  await redis.start()
  await eventually(() => a.service.stats().redis.ready && b.service.stats().redis.ready, { what: 'both connected again' })
  publish(a, 'after1')
  publish(a, 'after2')
  await eventually(() => deliveredTag(b, 'after2') && deliveredTag(a, 'after2'), { what: () => `after2 on both hosts; B has ${tagsOf(b)}` })
  const expected = ['r1', 'r2', 'r3', 'd1', 'd2', 'd3', 'after1', 'after2']
  assert.deepStrictEqual(tagsOf(b), expected, 'B: every packet once, in A\'s order (r1-r3 Redis lost are sent again, and dropped as read)')
  assert.deepStrictEqual(tagsOf(a), expected, 'A: every packet once (its reader skips what it numbered itself)')
  assert.ok(b.delivered().every((s) => isStreamOffset(s.data.o)), 'B got them all from the stream: offsets any host can replay')
  assert.strictEqual(a.service.stats().redis.unsent, 0)

  // Cut on B after d1: restored on B with what came after, each once. Not on A: its clients got
  // d1-d3 before any stream entry it delivered meanwhile, so it cannot tell what such an offset missed.
  const offsetOfD1 = deliveredTag(b, 'd1').data.o
  await b.service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1']) })
  const restored = await b.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offsetOfD1 })
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), ['d2', 'd3', 'after1', 'after2'])
  await b.service.onStateRequest({ op: 'persist', n: '/', session: session('p2', ['sid-p2']) })
  assert.strictEqual(await a.service.onStateRequest({ op: 'restore', n: '/', s: 'p2', o: offsetOfD1 }), null, 'not exact on the host that numbered them')
})

test('in process: an XADD that timed out and landed later is sent again: every host delivers it once, and a restore replays it once', redisServerSuite('the in-process copy test', 60000), async () => {
  const redis = await privateRedis()
  cleanups.push(() => redis.stop())
  await redis.start()
  const { a, b, marker } = await twoPrimaries('sio-rec-copy', { url: redis.url })
  for (const host of [a, b]) host.sent.length = 0
  const admin = new Redis(redis.url)
  admin.on('error', () => {})
  cleanups.push(() => admin.disconnect())

  // Writes paused longer than the XADD's timeout (2 s): A gives up on p1 and numbers it itself;
  // the XADD is in Redis's input buffer and lands when the pause ends.
  await admin.call('CLIENT', 'PAUSE', '3000', 'WRITE')
  publish(a, 'p1')
  await eventually(() => deliveredTag(a, 'p1'), { what: 'p1 numbered by A after its XADD timed out', timeoutMs: 10000 })
  await eventually(() => deliveredTag(b, 'p1'), { what: 'p1 read by B once the pause ended', timeoutMs: 10000 })
  publish(a, 'p2')
  await eventually(() => deliveredTag(b, 'p2') && a.service.stats().redis.unsent === 0, { what: 'p2 on B, nothing left to send' })
  publish(a, 'p3')
  await eventually(() => deliveredTag(b, 'p3') && deliveredTag(a, 'p3'), { what: 'p3 on both hosts' })
  const stream = await admin.xrange(`{${a.service.options.channel}}:sio:log:/`, '-', '+')
  const uidOf = (entry) => entry[1][entry[1].indexOf('u') + 1]
  const uids = stream.map(uidOf)
  assert.ok(uids.length > new Set(uids).size, `p1 is in the stream twice (the XADD that timed out, then the copy): ${uids}`)
  assert.deepStrictEqual(tagsOf(b), ['p1', 'p2', 'p3'], 'B: once each, in order')
  assert.deepStrictEqual(tagsOf(a), ['p1', 'p2', 'p3'], 'A: once each, in order')

  await a.service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1']) })
  const restored = await b.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: marker })
  assert.deepStrictEqual(restored.missed.map(([, data]) => data[1]), ['p1', 'p2', 'p3'], 'the copy is not replayed')
})

test('in process: broadcasts numbered while an XADD is unanswered across a reconnect are not overtaken by the first one after it', redisServerSuite('the in-process overtaking test', 60000), async () => {
  const redis = await privateRedis()
  cleanups.push(() => redis.stop())
  await redis.start()
  // B sends: it has sent nothing before, so nothing of its own waits to be checked after the outage.
  const { a: receiver, b: sender } = await twoPrimaries('sio-rec-overtake', { url: redis.url })
  for (const host of [receiver, sender]) host.sent.length = 0
  const admin = new Redis(redis.url)
  admin.on('error', () => {})
  cleanups.push(() => admin.disconnect())
  const until = (condition) => new Promise((resolve) => {
    const poll = () => condition() ? resolve() : setImmediate(poll)
    poll()
  })

  // k's XADD waits in Redis (writes paused); its connection is cut and ioredis sends it again
  // on the next one, where it waits again. d1 and d2 come while the connection is down, m as
  // soon as it is back: m must not overtake them.
  await admin.call('CLIENT', 'PAUSE', '1500', 'WRITE')
  publish(sender, 'k')
  await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes')
  await until(() => !sender.service.stats().redis.ready)
  publish(sender, 'd1')
  publish(sender, 'd2')
  await until(() => sender.service.stats().redis.ready)
  publish(sender, 'm')
  await eventually(() => deliveredTag(receiver, 'm') && deliveredTag(sender, 'm'), { what: () => `m on both hosts; the sender has ${tagsOf(sender)}, the receiver ${tagsOf(receiver)}`, timeoutMs: 15000 })
  publish(sender, 'last')
  await eventually(() => deliveredTag(receiver, 'last') && deliveredTag(sender, 'last'), { what: 'the last one on both hosts' })
  assert.deepStrictEqual(tagsOf(receiver), ['k', 'd1', 'd2', 'm', 'last'], 'the other host: in the sender\'s order, once each')
  assert.deepStrictEqual(tagsOf(sender), ['k', 'd1', 'd2', 'm', 'last'], 'the sender: in its own order, once each')
})

test('in process: past recovery.maxPackets waiting for Redis, the oldest are not sent to the other hosts (counted, logged once); the rest go in order', redisServerSuite('the in-process bound test', 60000), async () => {
  const redis = await privateRedis()
  cleanups.push(() => redis.stop())
  await redis.start()
  const warnings = []
  const { a, b } = await twoPrimaries('sio-rec-unsent', { url: redis.url, maxPackets: 3, log: { info () {}, warn: (line) => warnings.push(line) } })
  for (const host of [a, b]) host.sent.length = 0

  await redis.stop()
  await eventually(() => a.service.stats().redis.degraded, { what: 'A sees Redis gone' })
  for (let i = 1; i <= 6; i++) publish(a, `d${i}`)
  assert.deepStrictEqual(tagsOf(a), ['d1', 'd2', 'd3', 'd4', 'd5', 'd6'], 'A delivers every one')
  assert.deepStrictEqual(a.service.stats().redis, { ready: false, degraded: true, unsent: 3, unsentDropped: 3 })
  assert.strictEqual(warnings.filter((line) => /recovery\.maxPackets \(3\)/.test(line)).length, 1, `logged once: ${warnings.join('\n')}`)

  await redis.start()
  // Once the three are in the stream: a broadcast made before would wait with them, over the bound.
  await eventually(() => a.service.stats().redis.ready && a.service.stats().redis.unsent === 0, { what: 'A sent what waited' })
  publish(a, 'after')
  await eventually(() => deliveredTag(b, 'after'), { what: () => `after on B; B has ${tagsOf(b)}` })
  assert.deepStrictEqual(tagsOf(b), ['d4', 'd5', 'd6', 'after'], 'the three kept, then the next one, in order')
  assert.strictEqual(a.service.stats().redis.unsentDropped, 3)
})

/** A TCP proxy in front of cluster `port` (test/helpers/tcp-proxy.js), closed after the tests. */
async function createProxy (port) {
  const proxy = await createTcpProxy(port)
  cleanups.push(proxy.close)
  return proxy
}

const env = (extra) => recoveryEnv(Object.assign({ workers: 1 }, extra))

/** A client in `room` that records the messages it gets and its (re)connections. */
function receiver (port, room, name) {
  const socket = connectClient(`http://127.0.0.1:${port}`, { transports: ['websocket'], forceNew: true, query: { room, name }, reconnectionDelay: 50, reconnectionDelayMax: 200 })
  sockets.push(socket)
  const client = { socket, name, got: [], offsets: [], connects: [], cuts: [] }
  socket.on('msg', (data, offset) => {
    client.got.push(data.n)
    client.offsets.push(offset)
  })
  socket.on('disconnect', (reason) => client.cuts.push(reason))
  socket.on('connect', () => client.connects.push({ id: socket.id, recovered: socket.recovered }))
  return client
}

/** Ask the server with an ack; rejects on the client's ack timeout. */
function ask (socket, event, ...args) {
  return new Promise((resolve, reject) => {
    socket.timeout(5000).emit(event, ...args, (err, value) => err ? reject(err) : resolve(value))
  })
}

function sender (port) {
  const socket = connectClient(`http://127.0.0.1:${port}`, { transports: ['websocket'], forceNew: true })
  sockets.push(socket)
  return socket
}

test('two clusters on one Redis: a client cut from cluster A reconnects to cluster B and is recovered, every message once and in order', { timeout: 120000 }, async (t) => {
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const bus = { redis: REDIS_URL, channel: uniquePrefix('sio-rec-move') }
  cleanups.push(() => deletePrefix('{' + bus.channel))
  const a = await startCluster(fixture, { env: env({ workers: 2, bus }) })
  const b = await startCluster(fixture, { env: env({ bus }) })
  const proxy = await createProxy(a.port)
  const moving = receiver(proxy.port, 'r', 'moving')
  const onB = receiver(b.port, 'r', 'stays-on-b')
  const fromA = sender(a.port)
  const fromB = sender(b.port)
  await eventually(() => [moving, onB].every((c) => c.socket.connected) && fromA.connected && fromB.connected, { what: 'every client connected' })
  const before = await ask(moving.socket, 'whoami')
  assert.ok(a.workerPids.has(before.pid), 'the moving client is on cluster A')

  // Each host reads the stream once its workers' namespace is known: send until each hears the other.
  // (The probes are strings; the messages counted below are numbers.)
  let probe = 0
  await eventually(async () => {
    await ask(fromB, 'send', 'r', `probe-b-${++probe}`)
    await ask(fromA, 'send', 'r', `probe-a-${probe}`)
    return moving.got.some((m) => /^probe-b/.test(m)) && onB.got.some((m) => /^probe-a/.test(m))
  }, { what: () => `both clusters hear each other\n--- A ---\n${a.output}\n--- B ---\n${b.output}`, intervalMs: 200 })
  const numbers = (c) => c.got.filter((m) => typeof m === 'number')
  const offsets = (c) => c.offsets.filter((o, i) => typeof c.got[i] === 'number')

  let n = 0
  const send = async (count) => {
    for (let i = 0; i < count; i++) await ask(++n % 2 ? fromA : fromB, 'send', 'r', n)
  }
  await send(4)
  await eventually(() => numbers(moving).length === 4, { what: 'messages 1-4 on the moving client' })

  // Cluster A goes away for this client: the connection is cut (a recoverable "transport close" on both sides).
  const redis = new Redis(REDIS_URL)
  cleanups.push(() => redis.quit())
  proxy.cut()
  await eventually(() => moving.cuts.length === 1, { what: 'the moving client cut' })
  // A's worker persists the session in Redis (the client is held by the proxy meanwhile).
  await eventually(async () => (await redis.zcard(`{${bus.channel}}:sio:idx:/`)) === 1, { what: 'the session persisted in Redis' })
  await send(6)
  await eventually(() => numbers(onB).length === 10, { what: 'messages 1-10 on cluster B' })
  proxy.release(b.port)
  await eventually(() => moving.connects.length === 2, { what: 'the moving client reconnected' })
  await send(4)
  await eventually(() => numbers(moving).length >= 14 && numbers(onB).length === 14, { what: 'messages 11-14 everywhere' })

  const now = await ask(moving.socket, 'whoami')
  assert.ok(b.workerPids.has(now.pid), 'the moving client is on cluster B now')
  assert.strictEqual(moving.socket.recovered, true, 'recovered on the client')
  assert.deepStrictEqual(moving.connects.map((c) => c.recovered), [false, true])
  assert.strictEqual(now.recovered, true, 'recovered on the server')
  assert.strictEqual(now.id, before.id, 'the same socket id')
  assert.deepStrictEqual(now.rooms.sort(), [before.id, 'r'].sort(), 'rooms restored')
  assert.deepStrictEqual(now.data, { name: 'moving', firstWorkerPid: before.pid }, 'socket.data restored (set on cluster A)')
  // Every message once, in the one order of the stream (what a client that never moved got), offsets included.
  assert.deepStrictEqual(numbers(moving), numbers(onB))
  assert.deepStrictEqual(numbers(moving).sort((x, y) => x - y), Array.from({ length: 14 }, (_, i) => i + 1))
  assert.deepStrictEqual(offsets(moving), offsets(onB), 'the same offsets (stream ids) on both clusters')
  assert.ok(offsets(moving).every((o) => /^\d+-\d+$/.test(o)))
  t.diagnostic(`cut: ${moving.cuts.join(', ')}; order: ${numbers(moving).join(' ')}`)
  for (const socket of sockets) socket.disconnect()
  await a.stop()
  await b.stop()
})

test('Redis unreachable, then back: no broadcast lost and nothing crashes; the host numbers them meanwhile (logged once), then the stream again', redisServerSuite('the Redis outage test', 120000), async () => {
  const redis = await privateRedis()
  cleanups.push(() => redis.stop())
  await redis.start()
  const bus = { redis: redis.url, channel: uniquePrefix('sio-rec-outage') }
  const cluster = await startCluster(fixture, { env: env({ workers: 2, bus }) })
  const clients = [receiver(cluster.port, 'r', 'one'), receiver(cluster.port, 'r', 'two')]
  const from = sender(cluster.port)
  await eventually(() => clients.every((c) => c.socket.connected) && from.connected, { what: 'every client connected' })
  const isStreamId = (offset) => /^\d+-\d+$/.test(offset)
  let n = 0
  /** One message at a time, each received by every client before the next. */
  async function send () {
    const sent = ++n
    await ask(from, 'send', 'r', sent)
    await eventually(() => clients.every((c) => c.got.includes(sent)), { what: () => `message ${sent} on every client\n--- cluster ---\n${cluster.output}` })
    return clients[0].offsets[clients[0].got.indexOf(sent)]
  }
  // Through the stream once the reader is up.
  await eventually(async () => isStreamId(await send()), { what: 'a message through the Redis stream' })

  await redis.stop()
  const during = []
  for (let i = 0; i < 5; i++) during.push(await send())
  assert.ok(during.slice(1).every((offset) => !isStreamId(offset)), `numbered by the host while Redis is down: ${during}`)
  await cluster.waitOutput(/socket\.io recovery: Redis .* cannot take broadcasts/)

  await redis.start()
  await eventually(async () => isStreamId(await send()), { what: 'messages through the stream again' })
  await cluster.waitOutput(/socket\.io recovery: Redis .* reachable again/)
  for (let i = 0; i < 3; i++) assert.ok(isStreamId(await send()))

  for (const c of clients) {
    assert.deepStrictEqual(c.got, Array.from({ length: n }, (_, i) => i + 1), `${c.name}: every message once, in order`)
    assert.strictEqual(new Set(c.offsets).size, c.offsets.length, `${c.name}: distinct offsets`)
    assert.deepStrictEqual(c.connects.length, 1, `${c.name}: never cut`)
  }
  assert.strictEqual(cluster.output.match(/cannot take broadcasts/g).length, 1, 'logged once for the outage')
  assert.ok((await ask(from, 'whoami')).pid, 'the workers still serve')
  assert.strictEqual(cluster.child.exitCode, null, 'the primary is alive')
  for (const socket of sockets) socket.disconnect()
  await cluster.stop()
})

test('two clusters, Redis restarted while cluster A sends: every client on cluster B (and on A) gets every message of A once, in the order A sent them', redisServerSuite('the cross-host outage test', 180000), async () => {
  const redis = await privateRedis()
  cleanups.push(() => redis.stop())
  await redis.start()
  const bus = { redis: redis.url, channel: uniquePrefix('sio-rec-order') }
  const a = await startCluster(fixture, { env: env({ workers: 1, bus }) })
  const b = await startCluster(fixture, { env: env({ workers: 2, bus }) })
  // Four clients on B, and one on A, next to the sender.
  const clients = Array.from({ length: 4 }, (_, i) => receiver(b.port, 'r', `b${i}`)).concat(receiver(a.port, 'r', 'a0'))
  const from = sender(a.port)
  await eventually(() => clients.every((c) => c.socket.connected) && from.connected, { what: 'every client connected' })
  const isStreamId = (offset) => /^\d+-\d+$/.test(offset)
  // B reads A's namespace once its own workers' is known: probe (strings) until every client on B hears A.
  let probe = 0
  await eventually(async () => {
    await ask(from, 'send', 'r', `probe-${++probe}`)
    return clients.every((c) => c.got.some((m, i) => typeof m === 'string' && isStreamId(c.offsets[i])))
  }, { what: () => `cluster B hears cluster A through the stream\n--- A ---\n${a.output}\n--- B ---\n${b.output}`, intervalMs: 200 })

  // A sends one message after another (each acknowledged by its worker) all through the outage.
  let sent = 0
  let sending = true
  const failures = []
  const sendingDone = (async () => {
    while (sending) {
      try {
        await ask(from, 'send', 'r', sent + 1)
        sent++
      } catch (err) {
        failures.push(`message ${sent + 1}: ${err.message}`)
        break
      }
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
  })()
  const numbers = (c) => c.got.filter((m) => typeof m === 'number')
  const missing = (c) => Array.from({ length: sent }, (_, i) => i + 1).filter((x) => !numbers(c).includes(x))
  try {
    await eventually(() => sent >= 20, { what: '20 messages before the outage' })
    await redis.stop()
    await a.waitOutput(/socket\.io recovery: Redis .* cannot take broadcasts/)
    const duringFrom = sent
    await eventually(() => sent >= duringFrom + 30, { what: '30 messages while Redis is down' })
    await redis.start()
    await a.waitOutput(/socket\.io recovery: Redis .* reachable again/)
    // Until B gets A's messages through the stream again, and some more after.
    await eventually(() => clients.every((c) => c.offsets.slice(-1).some(isStreamId) && numbers(c).length > 0), { timeoutMs: 60000, what: () => `messages through the stream again on B\n--- A ---\n${a.output}\n--- B ---\n${b.output}` })
    const streamFrom = sent
    await eventually(() => sent >= streamFrom + 20, { what: '20 more messages' })
  } finally {
    sending = false
    await sendingDone
  }
  assert.deepStrictEqual(failures, [])
  await eventually(() => clients.every((c) => numbers(c).length >= sent), { timeoutMs: 30000, what: () => `all ${sent} messages on every client; missing: ${clients.map((c) => `${c.name} ${missing(c).join(' ')}`).join(', ')}\n--- A ---\n${a.output}` })
  const expected = Array.from({ length: sent }, (_, i) => i + 1)
  for (const c of clients) {
    assert.deepStrictEqual(numbers(c), expected, `${c.name}: every message of A once, in A's order`)
    assert.deepStrictEqual(c.connects.length, 1, `${c.name}: never cut`)
  }
  // What A numbered itself during the outage reached B through the stream too: offsets any host can replay.
  for (const c of clients.filter((c) => c.name.startsWith('b'))) {
    const numbered = c.offsets.filter((offset, i) => typeof c.got[i] === 'number')
    assert.deepStrictEqual(numbered.filter((offset) => !isStreamId(offset)), [], `${c.name}: every message of A from the stream`)
  }
  for (const socket of sockets) socket.disconnect()
  await a.stop()
  await b.stop()
})
