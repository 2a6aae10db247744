'use strict'

/**
 * lib/state/rate-limit-hit-batch.js on a private redis-server, through the
 * primary's app-state connection as lib/state/redis-client.js opens it: the
 * hits of one turn are one script call, each hit gets its own count (the
 * same key twice in a turn included), a long batch is split, a key Redis
 * refuses fails that hit only, a flushed script cache (a Redis restart,
 * SCRIPT FLUSH) loses no count, and a Redis that hangs fails the batch's hits
 * within the command timeout.
 */

const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { connectState } = require('../lib/state/redis-client')
const { RedisRateLimitCounters } = require('../lib/state/rate-limit-redis')
const { MAX_KEYS_PER_CALL } = require('../lib/state/rate-limit-hit-batch')
const { parseRedisTarget } = require('../lib/redis/target')
const { privateRedisForSuite, redisServerSuite } = require('./helpers/redis')

describe('rate-limit hits batched per turn', redisServerSuite('rate-limit hit batch suite', 30000), () => {
  const server = privateRedisForSuite()

  /** Counters on a fresh app-state connection, with the names of the commands it sends. */
  function counters (keyPrefix, timeoutMs) {
    const connection = connectState(parseRedisTarget(server.url, 'bus.redis'), timeoutMs || 2000)
    const sent = []
    const sendCommand = connection.client.sendCommand
    connection.client.sendCommand = function recordedSend (command) {
      sent.push({ name: command.name, keys: typeof command.getKeys === 'function' ? command.getKeys().length : 0 })
      return sendCommand.apply(this, arguments)
    }
    const rate = new RedisRateLimitCounters(connection, { keyPrefix })
    return { rate, sent, close: () => connection.client.disconnect() }
  }

  const scripts = (sent) => sent.filter((c) => c.name === 'evalsha' || c.name === 'eval')

  it('a turn\'s hits are one script call, and each hit gets its own count', async () => {
    const { rate, sent, close } = counters('batch:a:')
    try {
      await rate.increment('warm', 60000) // the connection is ready before the turn that counts
      sent.length = 0
      const hits = await Promise.all(['x', 'y', 'x', 'z', 'x'].map((key) => rate.increment(key, 60000)))
      assert.deepEqual(hits.map((hit) => hit.totalHits), [1, 1, 2, 1, 3])
      assert.deepEqual(scripts(sent).map((c) => c.keys), [5], 'one call with the five keys')
      const ttl = await server.admin.pttl('batch:a:y')
      assert.ok(ttl > 55000 && ttl <= 60000, `a new key gets the window as its expiry (${ttl} ms)`)
      for (const hit of hits) assert.ok(hit.resetTime > Date.now() + 55000)
    } finally {
      close()
    }
  })

  it(`a batch longer than ${MAX_KEYS_PER_CALL} keys is split into calls of at most ${MAX_KEYS_PER_CALL}`, async () => {
    const { rate, sent, close } = counters('batch:b:')
    try {
      await rate.increment('warm', 60000)
      sent.length = 0
      const n = MAX_KEYS_PER_CALL * 2 + 10
      const hits = await Promise.all(Array.from({ length: n }, () => rate.increment('one', 60000)))
      assert.deepEqual(hits.map((hit) => hit.totalHits), Array.from({ length: n }, (_, i) => i + 1))
      assert.deepEqual(scripts(sent).map((c) => c.keys), [MAX_KEYS_PER_CALL, MAX_KEYS_PER_CALL, 10])
    } finally {
      close()
    }
  })

  it('a key Redis refuses fails that hit only; the others in the batch count', async () => {
    const { rate, close } = counters('batch:c:')
    try {
      await server.admin.set('batch:c:text', 'not a number')
      await server.admin.del('batch:c:list')
      await server.admin.lpush('batch:c:list', 'item')
      const outcomes = await Promise.allSettled(['good', 'text', 'list', 'good'].map((key) => rate.increment(key, 60000)))
      assert.deepEqual(outcomes.map((o) => o.status), ['fulfilled', 'rejected', 'rejected', 'fulfilled'])
      assert.match(outcomes[1].reason.message, /rate-limit count refused by Redis: ERR value is not an integer/)
      assert.match(outcomes[2].reason.message, /WRONGTYPE/)
      assert.deepEqual([outcomes[0].value.totalHits, outcomes[3].value.totalHits], [1, 2])
      assert.equal(await server.admin.get('batch:c:text'), 'not a number', 'the refused key is left as it was')
    } finally {
      close()
    }
  })

  it('a flushed script cache loses no count (NOSCRIPT is answered by loading the script)', async () => {
    const { rate, close } = counters('batch:d:')
    try {
      const first = await Promise.all(Array.from({ length: 5 }, () => rate.increment('k', 60000)))
      assert.deepEqual(first.map((hit) => hit.totalHits), [1, 2, 3, 4, 5])
      assert.equal(await server.admin.script('FLUSH'), 'OK')
      const second = await Promise.all(Array.from({ length: 5 }, () => rate.increment('k', 60000)))
      assert.deepEqual(second.map((hit) => hit.totalHits), [6, 7, 8, 9, 10])
      assert.equal(await server.admin.script('FLUSH'), 'OK')
      assert.equal((await rate.increment('k', 60000)).totalHits, 11, 'a lone hit too')
      assert.equal(Number(await server.admin.get('batch:d:k')), 11)
      await rate.decrement('k')
      assert.equal((await rate.get('k')).totalHits, 10)
    } finally {
      close()
    }
  })

  it('a Redis that hangs: the batch\'s hits fail within the command timeout, and counting goes on once it answers', async () => {
    const { rate, close } = counters('batch:e:', 300)
    try {
      await rate.increment('k', 60000)
      assert.equal(await server.admin.client('PAUSE', 1500, 'ALL'), 'OK')
      const outcomes = await Promise.allSettled(['k', 'k', 'k'].map((key) => rate.increment(key, 60000)))
      assert.deepEqual(outcomes.map((o) => o.status), ['rejected', 'rejected', 'rejected'])
      for (const o of outcomes) assert.match(o.reason.message, /timed out/i)
      assert.equal(await server.admin.client('UNPAUSE'), 'OK')
      // The paused call was written before its timeout, so Redis runs it when it wakes: a hit
      // whose caller saw an error may still count, which errs on the side of the limit.
      const after = await rate.increment('k', 60000)
      assert.equal(after.totalHits, 5)
    } finally {
      await server.admin.client('UNPAUSE').catch(() => {})
      close()
    }
  })
})
