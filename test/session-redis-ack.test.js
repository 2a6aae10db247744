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

describe('Redis frozen (SIGSTOP) between loading a session and saving it', { skip: noRedisServer }, () => {
  const express = require('express')
  const request = require('supertest')
  const session = require('../middleware/session')
  let redis
  let mw
  let frozen = false

  before(async () => {
    redis = await privateRedis()
    await redis.start()
    mw = session({ store: 'redis', redis: redis.url, secret: 'redis-ack-secret-0123456789-abcdefghij', timeoutMs: 500 })
  })
  after(async () => {
    // A stopped redis-server must be continued before anything else talks to it.
    if (frozen) process.kill(redis.pid, 'SIGCONT')
    if (mw) await mw.close()
    if (redis) await redis.stop()
  })

  it('the write is answered 503, not 200, when Redis does not acknowledge the save', async () => {
    let reached
    let release
    const handlerReached = new Promise((resolve) => { reached = resolve })
    const handlerMayAnswer = new Promise((resolve) => { release = resolve })
    const app = express()
    app.use(mw)
    app.get('/count', function count (req, res) {
      req.session.n = (req.session.n || 0) + 1
      res.json({ n: req.session.n })
    })
    app.get('/count-after-freeze', async function countLater (req, res) {
      req.session.n = (req.session.n || 0) + 1
      reached()
      await handlerMayAnswer
      res.json({ n: req.session.n })
    })
    const agent = request.agent(app)
    assert.equal((await agent.get('/count').expect(200)).body.n, 1)
    assert.equal((await agent.get('/count').expect(200)).body.n, 2)

    const pending = agent.get('/count-after-freeze').then((res) => res)
    await handlerReached // the session is loaded: the save is what meets the frozen Redis
    process.kill(redis.pid, 'SIGSTOP')
    frozen = true
    release()
    const res = await pending
    process.kill(redis.pid, 'SIGCONT')
    frozen = false
    assert.equal(res.status, 503, `a save Redis did not acknowledge must not be a 200: ${res.status} ${res.text}`)
    assert.match(res.body.error, /^session store unavailable: redis/)
    assert.equal(res.headers['set-cookie'], undefined, 'no cookie on the 503')

    // Once Redis runs again the session works; the unacknowledged write may or may not have landed.
    const after = await eventuallyPasses(() => agent.get('/count').expect(200), { timeoutMs: 10000 })
    assert.ok(after.body.n === 3 || after.body.n === 4, `n=${after.body.n}`)
  })
})
