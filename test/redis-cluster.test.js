'use strict'

/**
 * Sessions and the bus on a real Redis Cluster (3 masters + 3 replicas on
 * loopback, started here from redis-server and torn down after, pass or fail):
 * every store operation with keys spread over slots, the bus over sharded
 * pub/sub (and classic when asked), and a master failover while 2 workers
 * serve session traffic. Under CI=true a missing redis-server fails these.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const crypto = require('crypto')
const Redis = require('ioredis')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { startRedisCluster } = require('./helpers/redis-topology')
const { redisServerSuite } = require('./helpers/redis')
const { stopAll } = require('./helpers/cluster')
const { sessionExpiringIn } = require('./helpers/session')
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
