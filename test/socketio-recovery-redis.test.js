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

const { test, after } = require('node:test')
const assert = require('node:assert')
const net = require('net')
const path = require('path')
const Redis = require('ioredis')
const { io: connectClient } = require('socket.io-client')
const { RecoveryService } = require('../lib/realtime/recovery-service')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { freePort } = require('./helpers/net')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')

const fixture = path.join(__dirname, 'fixtures/socketio-recovery.js')
const sockets = []
const cleanups = []

after(async () => {
  for (const socket of sockets) socket.disconnect()
  for (const cleanup of cleanups) await cleanup()
  await stopAll()
})

const toAll = { rooms: [], except: [], flags: {} }
const session = (pid, rooms, data) => ({ sid: 'sid-' + pid, pid, rooms, data: data || { name: pid } })

/** A primary's recovery service on the shared Redis; `sent` collects what it sends its workers. */
function primary (channel, log) {
  const sent = []
  const bus = { broadcast: (topic, data, options) => sent.push({ topic, data, options }) }
  const service = new RecoveryService(bus, { redis: REDIS_URL, channel, log })
  cleanups.push(() => service.close())
  return { service, sent, delivered: () => sent.filter((s) => s.data.o !== undefined) }
}

function publish (host, n, opts) {
  host.service.onQueueMessage({ op: 'pub', n: '/', k: 1, m: { uid: 'u', packet: { type: 2, nsp: '/', data: ['m', n] }, opts: opts || toAll } }, {})
}

test('in process: two primaries share one stream (one order) and a session persisted by one restores on the other, once', async (t) => {
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const channel = uniquePrefix('sio-rec-unit')
  cleanups.push(() => deletePrefix('{' + channel))
  const a = primary(channel)
  const b = primary(channel)
  for (const host of [a, b]) host.service.onQueueMessage({ op: 'cfg', n: '/', d: 60000, p: 1000, x: 10, l: 5000 }, {})
  // Each host reads from where the stream is when it starts: publish until both readers see the same packets.
  await eventually(() => a.service.redis.ready && b.service.redis.ready, { what: 'both connected to Redis' })
  let probe = 0
  await eventually(() => {
    publish(a, `probe-${++probe}`)
    return b.delivered().some((s) => /^\d+-\d+$/.test(s.data.o))
  }, { what: 'a packet of A read from the stream by B', intervalMs: 100 })
  // From the next packet on, both read everything: wait for a marker on both.
  publish(a, 'marker')
  const marked = (host) => host.delivered().some((s) => s.data.m.packet.data[1] === 'marker')
  await eventually(() => marked(a) && marked(b), { what: 'the marker on both hosts' })
  for (const host of [a, b]) host.sent.length = 0

  publish(a, 1)
  publish(b, 2, { rooms: ['r'], except: [], flags: {} })
  publish(a, 3, { rooms: ['other'], except: [], flags: {} })
  publish(b, 4, { rooms: [], except: ['r'], flags: {} })
  publish(a, 5)
  await eventually(() => a.delivered().length === 5 && b.delivered().length === 5, { what: 'five packets on both hosts' })
  const order = (host) => host.delivered().map((s) => [s.data.o, s.data.m.packet.data[1]])
  assert.deepStrictEqual(order(a), order(b), 'the same packets, with the same offsets, in the same order on both hosts')
  assert.ok(a.delivered().every((s) => s.options.scope === 'host' && s.data.o === s.data.q && /^\d+-\d+$/.test(s.data.o)), 'offsets are stream ids')
  const offsets = order(a).map(([o]) => o)

  // Cut on A after packet 1; restored on B: packets 2 and 5 (its rooms), not 3 (other room) nor 4 (except r).
  assert.strictEqual(await a.service.onStateRequest({ op: 'persist', n: '/', session: session('p1', ['sid-p1', 'r'], { name: 'moving', n: 1 }) }), true)
  const restored = await b.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offsets[0] })
  assert.deepStrictEqual(restored.session.data, { name: 'moving', n: 1 })
  assert.deepStrictEqual(restored.session.rooms, ['sid-p1', 'r'])
  assert.deepStrictEqual(restored.missed, [[offsets[1], ['m', 2]], [offsets[4], ['m', 5]]])
  assert.strictEqual(restored.head, offsets[4])
  assert.strictEqual(await a.service.onStateRequest({ op: 'restore', n: '/', s: 'p1', o: offsets[0] }), null, 'a session restores once, whichever host asks')

  // An offset that is not in the stream (forged, or trimmed) is not recovered.
  await a.service.onStateRequest({ op: 'persist', n: '/', session: session('p2', ['sid-p2']) })
  assert.strictEqual(await b.service.onStateRequest({ op: 'restore', n: '/', s: 'p2', o: '1-0' }), null)

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
