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
const path = require('path')
const crypto = require('crypto')
const Redis = require('ioredis')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { startRedisCluster } = require('./helpers/redis-topology')
const { redisServerPath } = require('./helpers/redis')
const { startCluster, stopAll } = require('./helpers/cluster')
const { sessionExpiringIn } = require('./helpers/session')
const { logInUsers, runSessionLoad, visitAll } = require('./helpers/session-load')
const { eventually } = require('./helpers/wait')

const SESSION_FIXTURE = path.join(__dirname, 'fixtures', 'session-cluster.js')
const BUS_FIXTURE = path.join(__dirname, 'fixtures', 'bus-cluster.js')
const IN_CI = process.env.CI === 'true' || process.env.CI === '1'
const missing = redisServerPath() ? false : 'redis-server is not installed (apt-get install redis-server)'
if (missing && IN_CI) throw new Error(`${missing}: under CI=true the Redis Cluster tests must run`)
const options = { skip: missing, timeout: 120000 }

function call (store, op, ...args) {
  return new Promise((resolve, reject) => store[op](...args, (err, value) => err ? reject(err) : resolve(value)))
}

function busDriver (cluster) {
  return async (target, action, args) => {
    const reply = await cluster.command({ type: 'bus-test:do', target, action, args }, 'bus-test:reply', 30000)
    if (reply.error) throw new Error(`${action} on ${target} failed: ${reply.error.message}`)
    return reply.result
  }
}

/** Broadcast from A's worker 0 until B's worker 1 has it (a subscription may still be settling). */
async function broadcastReaches (runA, runB, marker) {
  let n = 0
  return eventually(async () => {
    await runA(0, 'broadcast', { topic: 't:b', data: { marker: `${marker}:${n++}` } })
    await new Promise((resolve) => setTimeout(resolve, 100))
    const got = await runB(1, 'received')
    return got.find((r) => r.data && typeof r.data.marker === 'string' && r.data.marker.startsWith(marker + ':'))
  }, { timeoutMs: 30000, intervalMs: 200, what: `a broadcast "${marker}" from cluster A to reach cluster B` })
}

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
    const channel = 'cz:bus:' + crypto.randomBytes(4).toString('hex')
    const env = { BUS_WORKERS: '2', BUS_REDIS: redis.url, BUS_CHANNEL: channel }
    const a = await startCluster(BUS_FIXTURE, { env })
    const b = await startCluster(BUS_FIXTURE, { env })
    try {
      const runA = busDriver(a)
      const runB = busDriver(b)
      const status = await eventually(async () => {
        const s = (await runA('primary', 'status')).bridge
        return s && s.connected && s
      }, { what: 'bridge A to connect' })
      assert.equal(status.topology, 'cluster')
      assert.equal(status.pubsub, 'sharded')
      await broadcastReaches(runA, runB, 'sharded')

      const owner = await redis.masterFor(channel)
      const ownerNode = new Redis(owner, '127.0.0.1')
      try {
        const [, shardSubscribers] = await ownerNode.call('PUBSUB', 'SHARDNUMSUB', channel)
        assert.equal(Number(shardSubscribers), 2, 'both hosts subscribe on the shard that owns the channel')
      } finally {
        ownerNode.disconnect()
      }
      for (const port of redis.ports) {
        const node = new Redis(port, '127.0.0.1')
        try {
          const [, classic] = await node.call('PUBSUB', 'NUMSUB', channel)
          assert.equal(Number(classic), 0, `no classic subscription on node ${port}`)
        } finally {
          node.disconnect()
        }
      }
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })

  it('bus.shardedPubSub: false uses classic pub/sub on the cluster', async () => {
    const channel = 'cz:bus:' + crypto.randomBytes(4).toString('hex')
    const env = { BUS_WORKERS: '2', BUS_REDIS: redis.url, BUS_CHANNEL: channel, BUS_SHARDED: 'false' }
    const a = await startCluster(BUS_FIXTURE, { env })
    const b = await startCluster(BUS_FIXTURE, { env })
    try {
      const runA = busDriver(a)
      const runB = busDriver(b)
      const status = await eventually(async () => {
        const s = (await runA('primary', 'status')).bridge
        return s && s.connected && s
      }, { what: 'bridge A to connect' })
      assert.equal(status.pubsub, 'classic')
      await broadcastReaches(runA, runB, 'classic')
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })

  it('a master failover under session load: 503 with Retry-After in the gap, never a wrong session, recovery by itself, sessions kept, the bus flows again', async () => {
    const prefix = 'cz-fo-' + crypto.randomBytes(3).toString('hex') + ':'
    const channel = 'cz:bus:' + crypto.randomBytes(4).toString('hex')
    const sessions = await startCluster(SESSION_FIXTURE, {
      env: { CZ_SESSION_OPTIONS: JSON.stringify({ store: 'redis', redis: redis.url, prefix }), CZ_TEST_OPTIONS: JSON.stringify({ workers: 2 }) }
    })
    const busEnv = { BUS_WORKERS: '2', BUS_REDIS: redis.url, BUS_CHANNEL: channel }
    const a = await startCluster(BUS_FIXTURE, { env: busEnv })
    const b = await startCluster(BUS_FIXTURE, { env: busEnv })
    try {
      const runA = busDriver(a)
      const runB = busDriver(b)
      await broadcastReaches(runA, runB, 'before')
      const workersBefore = (await sessions.stats()).workers.map((w) => w.pid).sort()

      const users = await logInUsers(sessions.port, 20, 'cluster-user')
      assert.deepEqual(await visitAll(sessions.port, users), users.map(() => 'ok'))
      await redis.syncReplicas()

      // The channel's master: the failover then hits the bus and about a third of the sessions.
      const victim = await redis.masterFor(channel)
      const load = runSessionLoad(sessions.port, users)
      await eventually(() => load.tally.ok >= 40, { what: 'session traffic before the failover' })
      await redis.failOver(victim)
      const okAtFailover = load.tally.ok
      await eventually(() => load.tally.ok >= okAtFailover + 100, { timeoutMs: 30000, what: 'session traffic after the failover' })
      const tally = await load.stop()
      assert.deepEqual(tally.wrong, [], 'no wrong answer: no silent new session, no other user\'s session, no 500')

      // Recovered by itself: every session written before the failover is there.
      const outcomes = await eventually(async () => {
        const round = await visitAll(sessions.port, users)
        return round.every((o) => o === 'ok') && round
      }, { timeoutMs: 20000, what: 'every user served again after the failover' })
      assert.equal(outcomes.length, 20)
      await broadcastReaches(runA, runB, 'after')
      assert.deepEqual((await sessions.stats()).workers.map((w) => w.pid).sort(), workersBefore, 'no worker crashed or was replaced')
    } finally {
      await Promise.all([sessions.stop(), a.stop(), b.stop()])
    }
  })
})
