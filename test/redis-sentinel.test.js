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
const crypto = require('crypto')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { startSentinel } = require('./helpers/redis-topology')
const { redisServerSuite } = require('./helpers/redis')
const { stopAll } = require('./helpers/cluster')
const { sessionExpiringIn } = require('./helpers/session')
const { call, twoBusClusters, failoverUnderLoad } = require('./helpers/redis-failover')

const options = redisServerSuite('Sentinel tests', 120000)

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

  it('the bus between two clusters follows the primary the sentinels name', async () => {
    const pair = await twoBusClusters(redis.url)
    try {
      const status = await pair.connected()
      assert.equal(status.topology, 'sentinel')
      assert.equal(status.pubsub, 'classic')
    } finally {
      await pair.stop()
    }
  })

  it('a failover under session load: 503 with Retry-After in the gap, never a wrong session, recovery by itself, sessions kept, the bus flows again', async () => {
    await failoverUnderLoad({
      url: redis.url,
      label: 'sentinel-user',
      syncReplicas: () => redis.syncReplicas(),
      failOver: () => redis.failOver()
    })
  })
})
