'use strict'

/**
 * Sessions and the bus on a real Sentinel-managed primary (a primary, 2
 * replicas and 3 sentinels on loopback, started here from redis-server and
 * torn down after, pass or fail): the store through a redis+sentinel:// URL
 * and through ioredis { sentinels, name } options, and a failover (the
 * primary killed) while 2 workers serve session traffic and two clusters
 * talk over the bus. Under CI=true a missing redis-server fails these.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const crypto = require('crypto')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { startSentinel } = require('./helpers/redis-topology')
const { redisServerPath } = require('./helpers/redis')
const { startCluster, stopAll } = require('./helpers/cluster')
const { sessionExpiringIn } = require('./helpers/session')
const { logInUsers, runSessionLoad, visitAll } = require('./helpers/session-load')
const { eventually } = require('./helpers/wait')

const SESSION_FIXTURE = path.join(__dirname, 'fixtures', 'session-cluster.js')
const BUS_FIXTURE = path.join(__dirname, 'fixtures', 'bus-cluster.js')
const IN_CI = process.env.CI === 'true' || process.env.CI === '1'
const missing = redisServerPath() ? false : 'redis-server is not installed (apt-get install redis-server)'
if (missing && IN_CI) throw new Error(`${missing}: under CI=true the Sentinel tests must run`)
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

describe('Redis Sentinel', options, () => {
  let redis
  before(async () => {
    redis = await startSentinel()
  })
  after(async () => {
    await stopAll()
    if (redis) await redis.stop()
  })

  for (const form of ['redis+sentinel:// URL', '{ sentinels, name } options']) {
    it(`the session store works through a ${form}`, async () => {
      const prefix = 'cz-sent-' + crypto.randomBytes(3).toString('hex') + ':'
      const store = new ClusterizeRedisStore({ redis: form.startsWith('redis') ? redis.url : redis.options, prefix })
      try {
        await call(store, 'set', 'a', sessionExpiringIn(60000, { n: 1 }))
        assert.equal((await call(store, 'get', 'a')).n, 1)
        await call(store, 'touch', 'a', sessionExpiringIn(120000, { n: 1 }))
        assert.equal(await call(store, 'length'), 1)
        assert.equal(store.topology, 'sentinel')
        await call(store, 'clear')
        assert.equal(await call(store, 'get', 'a'), null)
      } finally {
        await store.close()
      }
    })
  }

  it('a failover under session load: 503 with Retry-After in the gap, never a wrong session, recovery by itself, sessions kept, the bus flows again', async () => {
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
      const status = await eventually(async () => {
        const s = (await runA('primary', 'status')).bridge
        return s && s.connected && s
      }, { what: 'bridge A to connect' })
      assert.equal(status.topology, 'sentinel')
      await broadcastReaches(runA, runB, 'before')
      const workersBefore = (await sessions.stats()).workers.map((w) => w.pid).sort()

      const users = await logInUsers(sessions.port, 20, 'sentinel-user')
      assert.deepEqual(await visitAll(sessions.port, users), users.map(() => 'ok'))
      await redis.syncReplicas()

      const load = runSessionLoad(sessions.port, users)
      await eventually(() => load.tally.ok >= 40, { what: 'session traffic before the failover' })
      await redis.failOver()
      const okAtPromotion = load.tally.ok
      await eventually(() => load.tally.ok >= okAtPromotion + 100, { timeoutMs: 30000, what: 'session traffic after the failover' })
      const tally = await load.stop()
      assert.deepEqual(tally.wrong, [], 'no wrong answer: no silent new session, no other user\'s session, no 500')

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
