'use strict'

/**
 * Sessions and the bus on a real Redis Cluster (3 masters + 3 replicas on
 * loopback, started here from redis-server and torn down after, pass or fail):
 * every store operation with keys spread over slots, the bus over sharded
 * pub/sub (and classic when asked), the primary's rate-limit counts on keys
 * of every master, and a master failover while 2 workers serve session traffic. Under CI=true a missing redis-server fails these.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('crypto')
const Redis = require('ioredis')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { connectState } = require('../lib/state/redis-client')
const { RedisRateLimitCounters } = require('../lib/state/rate-limit-redis')
const { DirectCommands } = require('../lib/redis/turn-pipeline')
const { parseRedisTarget } = require('../lib/redis/target')
const { startRedisCluster } = require('./helpers/redis-topology')
const { redisServerSuite } = require('./helpers/redis')
const { stopAll } = require('./helpers/cluster')
const { sessionExpiringIn } = require('./helpers/session')
const { eventually } = require('./helpers/wait')
const { call, twoBusClusters, broadcastReaches, failoverUnderLoad } = require('./helpers/redis-failover')

const options = redisServerSuite('Redis Cluster tests', 120000)

describe('Redis Cluster', options, () => {
  let redis
  before(async () => {
    redis = await startRedisCluster()
  })
  after(async () => {
    await stopAll()
    if (redis) await redis.stop()
  })

  it('the session store works with keys spread over every master: get, set, touch, destroy, length, all, clear, TTL, prefix', async () => {
    const prefix = 'cz-sess-' + crypto.randomBytes(3).toString('hex') + ':'
    const store = new ClusterizeRedisStore({ redis: redis.url, prefix })
    const neighbour = new ClusterizeRedisStore({ redis: redis.nodes, prefix: 'other-' + prefix })
    const direct = new Redis.Cluster(redis.nodes)
    try {
      const sids = Array.from({ length: 30 }, (_, i) => `sid-${i}`)
      for (const sid of sids) await call(store, 'set', sid, sessionExpiringIn(60000, { sid }))
      await call(neighbour, 'set', 'sid-0', sessionExpiringIn(60000, { other: true }))
      const owners = new Set()
      for (const sid of sids) owners.add(await redis.masterFor(prefix + sid))
      assert.equal(owners.size, 3, 'the keys live on all 3 masters')

      assert.equal((await call(store, 'get', 'sid-7')).sid, 'sid-7')
      assert.equal(await call(store, 'length'), 30, 'length counts the keys of every master, and not the other prefix')
      const all = await call(store, 'all')
      assert.deepEqual(all.map((s) => s.id).sort(), [...sids].sort())

      const pttl = await direct.pttl(prefix + 'sid-3')
      assert.ok(pttl > 55000 && pttl <= 60000, `expiry in milliseconds matches the cookie (${pttl} ms)`)
      await call(store, 'touch', 'sid-3', sessionExpiringIn(120000, { sid: 'sid-3' }))
      assert.ok(await direct.pttl(prefix + 'sid-3') > 60000, 'touch extends the expiry')
      assert.equal((await call(store, 'get', 'sid-3')).sid, 'sid-3', 'touch keeps the data')
      await call(store, 'touch', 'never-saved', sessionExpiringIn(60000))
      assert.equal(await call(store, 'get', 'never-saved'), null, 'touch does not revive a missing session')

      const viaClient = new ClusterizeRedisStore({ redis: direct, prefix })
      assert.equal(await call(viaClient, 'length'), 30, 'an ioredis Cluster client passed in works the same')
      await viaClient.close()
      assert.equal(direct.status, 'ready', 'a client passed in is left open')

      await call(store, 'destroy', 'sid-7')
      assert.equal(await call(store, 'get', 'sid-7'), null)
      await call(store, 'clear')
      assert.equal(await call(store, 'length'), 0, 'clear removes the keys on every master')
      assert.equal((await call(neighbour, 'get', 'sid-0')).other, true, 'clear leaves another prefix alone')
    } finally {
      await call(neighbour, 'clear').catch(() => {})
      await store.close()
      await neighbour.close()
      direct.disconnect()
    }
  })

  it('app state: rate-limit counts on keys of every master, many hits in one turn (no cross-slot pipeline)', async () => {
    const connection = connectState(parseRedisTarget(redis.url, 'bus.redis'), 2000)
    const { client, commands } = connection
    client.on('error', () => {})
    const keyPrefix = 'cz-rl-' + crypto.randomBytes(3).toString('hex') + ':'
    try {
      assert.ok(commands instanceof DirectCommands, 'a Cluster keeps ioredis\'s own pipelining (per node)')
      const counters = new RedisRateLimitCounters(connection, { keyPrefix })
      const keys = Array.from({ length: 30 }, (_, i) => `client-${i}`)
      const owners = new Set()
      for (const key of keys) owners.add(await redis.masterFor(keyPrefix + key))
      assert.equal(owners.size, 3, 'the keys live on all 3 masters')
      const hits = await Promise.all(keys.concat(keys).map((key) => counters.increment(key, 60000)))
      assert.deepEqual(hits.map((hit) => hit.totalHits), Array(30).fill(1).concat(Array(30).fill(2)))
      assert.equal((await counters.get('client-7')).totalHits, 2)
      await counters.resetAll('')
      assert.equal(await counters.get('client-7'), undefined)
    } finally {
      client.disconnect()
    }
  })

  it('the bus between two clusters uses sharded pub/sub: only the channel\'s shard carries it', async () => {
    const pair = await twoBusClusters(redis.url)
    try {
      const status = await pair.connected()
      assert.equal(status.topology, 'cluster')
      assert.equal(status.pubsub, 'sharded')
      await broadcastReaches(pair, 'sharded')

      const ownerNode = new Redis(await redis.masterFor(pair.channel), '127.0.0.1')
      try {
        const [, shardSubscribers] = await ownerNode.call('PUBSUB', 'SHARDNUMSUB', pair.channel)
        assert.equal(Number(shardSubscribers), 2, 'both hosts subscribe on the shard that owns the channel')
      } finally {
        ownerNode.disconnect()
      }
      for (const port of redis.ports) {
        const node = new Redis(port, '127.0.0.1')
        try {
          const [, classic] = await node.call('PUBSUB', 'NUMSUB', pair.channel)
          assert.equal(Number(classic), 0, `no classic subscription on node ${port}`)
        } finally {
          node.disconnect()
        }
      }
    } finally {
      await pair.stop()
    }
  })

  it('bus.shardedPubSub: false uses classic pub/sub on the cluster', async () => {
    const pair = await twoBusClusters(redis.url, { BUS_SHARDED: 'false' })
    try {
      assert.equal((await pair.connected()).pubsub, 'classic')
      await broadcastReaches(pair, 'classic')
    } finally {
      await pair.stop()
    }
  })

  it('socket.io recovery with bus.redis on the cluster: two primaries read one stream in one order; a session persisted by one restores on the other', async () => {
    const { RecoveryService } = require('../lib/realtime/recovery-service')
    const channel = 'cz-sio-' + crypto.randomBytes(3).toString('hex')
    const hosts = [0, 1].map(() => {
      const sent = []
      const service = new RecoveryService({ broadcast: (topic, data) => { if (data.o !== undefined) sent.push(data) } }, { redis: redis.url, channel })
      service.onQueueMessage({ op: 'cfg', n: '/', d: 60000, l: 5000 }, {})
      return { service, sent }
    })
    // A broadcast ClusterMessage (socket.io-adapter's), as a worker's doPublish() sends it.
    const publish = (host, n) => host.service.onQueueMessage({ op: 'pub', n: '/', m: { uid: 'u', nsp: '/', type: 3, data: { packet: { type: 2, data: ['m', n] }, opts: { rooms: [], except: [], flags: {} } } } }, {})
    const streamed = (host) => host.sent.filter((d) => /^\d+-\d+$/.test(d.o))
    try {
      // Each primary reads the stream from where it is when it starts: publish until the other one reads it.
      await eventually(() => {
        publish(hosts[0], 'probe')
        return streamed(hosts[1]).length > 0
      }, { what: 'a packet read from the stream by the other primary', intervalMs: 100 })
      publish(hosts[0], 'marker')
      await eventually(() => hosts.every((h) => streamed(h).some((d) => d.m.data.packet.data[1] === 'marker')), { what: 'the marker on both' })
      for (const host of hosts) host.sent.length = 0
      for (let n = 1; n <= 6; n++) publish(hosts[n % 2], n)
      await eventually(() => hosts.every((h) => h.sent.length === 6), { what: 'six packets on both' })
      const order = (host) => host.sent.map((d) => [d.o, d.m.data.packet.data[1]])
      assert.deepEqual(order(hosts[0]), order(hosts[1]), 'one order, one set of offsets')
      await hosts[0].service.onStateRequest({ op: 'persist', n: '/', session: { sid: 's', pid: 'p', rooms: ['s'], data: { x: 1 } } })
      const restored = await hosts[1].service.onStateRequest({ op: 'restore', n: '/', s: 'p', o: order(hosts[0])[1][0] })
      assert.deepEqual(restored.session.data, { x: 1 })
      assert.deepEqual(restored.missed.map(([, data]) => data[1]), order(hosts[0]).slice(2).map(([, n]) => n))
      // Every key of the app in the slot of its hash tag: one master.
      const owners = new Set()
      for (const key of ['log:/', 'wake', 'idx:/', 's:/:p']) owners.add(await redis.masterFor(`{${channel}}:sio:${key}`))
      assert.equal(owners.size, 1)
    } finally {
      for (const host of hosts) await host.service.close()
    }
  })

  it('a master failover under session load: 503 with Retry-After in the gap, never a wrong session, recovery by itself, sessions kept, the bus flows again', async () => {
    await failoverUnderLoad({
      url: redis.url,
      label: 'cluster-user',
      syncReplicas: () => redis.syncReplicas(),
      // The channel's master: the failover then hits the bus and about a third of the sessions.
      failOver: async (channel) => redis.failOver(await redis.masterFor(channel))
    })
  })
})
