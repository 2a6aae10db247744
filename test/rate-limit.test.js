'use strict'

/**
 * The rate-limit store without processes: the primary's counters (this
 * host's, and Redis's against the real Redis at REDIS_URL over fresh
 * connections), the service's request checks, and ClusterStore under the
 * real express-rate-limit, its service in this process. The cluster runs
 * (2 workers, two clusters on one Redis) need the internal service layer.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const http = require('http')
const express = require('express')
const { rateLimit, MemoryStore } = require('express-rate-limit')
const Redis = require('ioredis')
const { RateLimitCounters } = require('../lib/state/rate-limit-counters')
const { RedisRateLimitCounters } = require('../lib/state/rate-limit-redis')
const { createRateLimitService, RATE_OP } = require('../lib/state/rate-limit-service')
const { clientOf, LOCAL_CALLER } = require('../lib/state/client')
const { ClusterStore } = require('../rate-limit')
const { connectRedis } = require('../lib/redis/connect')
const { parseRedisTarget } = require('../lib/redis/target')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
const { freePort } = require('./helpers/net')

/** A client calling the service's handlers in this process (the service layer's in-process path). */
function serviceOver (service) {
  return clientOf('rate-limit', { requests: service.handlers }, LOCAL_CALLER)
}

describe('RateLimitCounters (one host)', () => {
  it('counts hits in a fixed window that starts at the first hit', () => {
    let now = 1000
    const counters = new RateLimitCounters({ now: () => now })
    assert.deepEqual(counters.increment('a', 100), { totalHits: 1, resetTime: 1100 })
    now = 1050
    assert.deepEqual(counters.increment('a', 100), { totalHits: 2, resetTime: 1100 })
    assert.deepEqual(counters.get('a'), { totalHits: 2, resetTime: 1100 })
    now = 1100
    assert.equal(counters.get('a'), undefined)
    assert.deepEqual(counters.increment('a', 100), { totalHits: 1, resetTime: 1200 })
  })

  it('decrement never goes below zero nor revives an ended window', () => {
    let now = 0
    const counters = new RateLimitCounters({ now: () => now })
    counters.increment('a', 100)
    counters.decrement('a')
    counters.decrement('a')
    assert.deepEqual(counters.get('a'), { totalHits: 0, resetTime: 100 })
    now = 200
    counters.decrement('a')
    assert.equal(counters.get('a'), undefined)
  })

  it('resetKey and resetAll(prefix) forget only what they name', () => {
    const counters = new RateLimitCounters()
    counters.increment('p1:a', 1000)
    counters.increment('p1:b', 1000)
    counters.increment('p2:a', 1000)
    counters.resetKey('p1:a')
    assert.equal(counters.get('p1:a'), undefined)
    counters.resetAll('p1:')
    assert.equal(counters.get('p1:b'), undefined)
    assert.equal(counters.get('p2:a').totalHits, 1)
    counters.resetAll('')
    assert.equal(counters.size, 0)
  })

  it('a flood of distinct keys stops at maxKeys; ended windows make room again', () => {
    let now = 0
    const counters = new RateLimitCounters({ maxKeys: 100, now: () => now })
    for (let i = 0; i < 100; i++) counters.increment('ip' + i, 50)
    assert.throws(() => counters.increment('one-too-many', 50), { code: 'ERR_CLUSTERIZE_RATE_LIMIT_FULL' })
    // A key already counted keeps counting when full.
    assert.equal(counters.increment('ip0', 50).totalHits, 2)
    now = 50
    assert.equal(counters.increment('one-too-many', 50).totalHits, 1)
    assert.equal(counters.size, 1)
  })

  it('keys that come back window after window do not grow the expiry heap without bound', () => {
    let now = 0
    const counters = new RateLimitCounters({ now: () => now })
    for (let round = 0; round < 5000; round++) {
      now += 10
      counters.increment('same', 5)
    }
    assert.ok(counters.expiries.size <= 2 * counters.size + 1025, `heap holds ${counters.expiries.size} entries for ${counters.size} key`)
  })
})

describe('rate-limit service requests', () => {
  it('refuses malformed requests with an error instead of throwing deep inside', async () => {
    const { handlers } = createRateLimitService()
    assert.throws(() => handlers[RATE_OP.INCREMENT]({ key: 42, windowMs: 10 }), { code: 'ERR_CLUSTERIZE_RATE_LIMIT_REQUEST' })
    assert.throws(() => handlers[RATE_OP.INCREMENT]({ key: 'a', windowMs: -1 }), { code: 'ERR_CLUSTERIZE_RATE_LIMIT_REQUEST' })
    assert.throws(() => handlers[RATE_OP.INCREMENT]({ key: 'x'.repeat(5000), windowMs: 10 }), { code: 'ERR_CLUSTERIZE_RATE_LIMIT_REQUEST' })
    assert.throws(() => handlers[RATE_OP.RESET_ALL](null), { code: 'ERR_CLUSTERIZE_RATE_LIMIT_REQUEST' })
    assert.deepEqual(Object.keys(handlers[RATE_OP.INCREMENT]({ key: 'a', windowMs: 10 })).sort(), ['resetTime', 'totalHits'])
  })
})

/** An express app limited to `limit` per window, on a loopback port. */
async function limitedServer (limiterOptions) {
  const app = express()
  app.use(rateLimit(Object.assign({ windowMs: 60000, limit: 10, standardHeaders: 'draft-8', legacyHeaders: false }, limiterOptions)))
  app.get('/', (req, res) => res.send('ok'))
  app.use((err, req, res, next) => res.status(500).send('store error: ' + err.code))
  const server = http.createServer(app)
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { port: server.address().port, close: () => new Promise((resolve) => server.close(resolve)) }
}

/** `n` GETs over fresh connections; their status codes. */
async function statuses (port, n) {
  const out = []
  for (let i = 0; i < n; i++) {
    const res = await fetch(`http://127.0.0.1:${port}/`, { headers: { connection: 'close' } })
    await res.text()
    out.push(res.status)
  }
  return out
}

function count (codes, code) {
  return codes.filter((c) => c === code).length
}

describe('ClusterStore under express-rate-limit (service in this process)', () => {
  it('two limiters (two servers) sharing one service let exactly `limit` through in total', async () => {
    const client = serviceOver(createRateLimitService())
    const a = await limitedServer({ store: new ClusterStore({ prefix: 'shared:', client }) })
    const b = await limitedServer({ store: new ClusterStore({ prefix: 'shared:', client }) })
    try {
      const codes = [...await statuses(a.port, 8), ...await statuses(b.port, 8)]
      assert.equal(count(codes, 200), 10)
      assert.equal(count(codes, 429), 6)
    } finally {
      await a.close()
      await b.close()
    }
  })

  it('control: two MemoryStores let twice the limit through', async () => {
    const a = await limitedServer({ store: new MemoryStore() })
    const b = await limitedServer({ store: new MemoryStore() })
    try {
      const codes = [...await statuses(a.port, 8), ...await statuses(b.port, 8)]
      assert.equal(count(codes, 200), 16)
    } finally {
      await a.close()
      await b.close()
    }
  })

  it('stores without a prefix get distinct ones, so two limiters never share counts', () => {
    const one = new ClusterStore()
    const two = new ClusterStore()
    assert.notEqual(one.prefix, two.prefix)
    assert.equal(one.localKeys, false)
  })

  it('a service that never answers: the call fails after timeoutMs; passOnStoreError decides', async () => {
    const silent = { request: () => new Promise(() => {}), notify () {}, onNotify () { return () => {} } }
    const strict = await limitedServer({ store: new ClusterStore({ prefix: 's:', client: silent, timeoutMs: 50 }) })
    const lenient = await limitedServer({ store: new ClusterStore({ prefix: 'l:', client: silent, timeoutMs: 50 }), passOnStoreError: true, logger: { error () {}, warn () {}, info () {} } })
    try {
      assert.deepEqual(await statuses(strict.port, 2), [500, 500])
      assert.deepEqual(await statuses(lenient.port, 2), [200, 200])
    } finally {
      await strict.close()
      await lenient.close()
    }
  })

  it('invalid options fail at construction, naming the option', () => {
    assert.throws(() => new ClusterStore({ timeoutMs: 0 }), { code: 'ERR_CLUSTERIZE_CONFIG_OPTION', option: 'timeoutMs' })
    assert.throws(() => new ClusterStore({ prefix: 7 }), { code: 'ERR_CLUSTERIZE_CONFIG_OPTION', option: 'prefix' })
  })
})

describe('rate-limit counts in Redis', async () => {
  const options = await redisTestOptions()
  const prefix = uniquePrefix('rate-limit')
  const opened = []
  function primaryClient (url) {
    const client = connectRedis(parseRedisTarget(url || REDIS_URL, 'redis'), { timeoutMs: 500, autoPipelining: true })
    client.on('error', () => {})
    opened.push(client)
    return client
  }
  after(async () => {
    for (const client of opened) client.disconnect()
    if (!options.skip) await deletePrefix(prefix)
  })

  it('two primaries (two fresh connections) count in the same keys: exactly `limit` pass across both', { skip: options.skip }, async () => {
    const hostA = serviceOver(createRateLimitService({ redis: primaryClient(), keyPrefix: prefix }))
    const hostB = serviceOver(createRateLimitService({ redis: primaryClient(), keyPrefix: prefix }))
    const a = await limitedServer({ store: new ClusterStore({ prefix: 'fleet:', client: hostA }) })
    const b = await limitedServer({ store: new ClusterStore({ prefix: 'fleet:', client: hostB }) })
    try {
      const codes = [...await statuses(a.port, 8), ...await statuses(b.port, 8)]
      assert.equal(count(codes, 200), 10)
      assert.equal(count(codes, 429), 6)
    } finally {
      await a.close()
      await b.close()
    }
  })

  it('concurrent hits are atomic: 200 at once give 200 distinct counts and one TTL', { skip: options.skip }, async () => {
    const counters = new RedisRateLimitCounters(primaryClient(), { keyPrefix: prefix })
    const hits = await Promise.all(Array.from({ length: 200 }, () => counters.increment('burst', 60000)))
    assert.deepEqual(hits.map((h) => h.totalHits).sort((x, y) => x - y), Array.from({ length: 200 }, (_, i) => i + 1))
    const check = new Redis(REDIS_URL)
    try {
      const ttl = await check.pttl(prefix + 'burst')
      assert.ok(ttl > 0 && ttl <= 60000, `ttl ${ttl}`)
    } finally {
      check.disconnect()
    }
  })

  it('decrement, get, resetKey and resetAll(prefix) act on one store\'s keys only', { skip: options.skip }, async () => {
    const counters = new RedisRateLimitCounters(primaryClient(), { keyPrefix: prefix })
    await counters.increment('one:a', 60000)
    await counters.increment('one:a', 60000)
    await counters.increment('one:b', 60000)
    await counters.increment('two:a', 60000)
    await counters.decrement('one:a')
    assert.equal((await counters.get('one:a')).totalHits, 1)
    await counters.decrement('missing')
    assert.equal(await counters.get('missing'), undefined, 'decrement must not create a key without TTL')
    await counters.resetKey('one:a')
    assert.equal(await counters.get('one:a'), undefined)
    await counters.resetAll('one:')
    assert.equal(await counters.get('one:b'), undefined)
    assert.equal((await counters.get('two:a')).totalHits, 1)
  })

  it('Redis unreachable: each call fails fast, passOnStoreError decides, nothing hangs or crashes', async () => {
    const port = await freePort()
    const service = createRateLimitService({ redis: primaryClient(`redis://127.0.0.1:${port}`), keyPrefix: prefix })
    const client = serviceOver(service)
    const strict = await limitedServer({ store: new ClusterStore({ prefix: 'down:', client }) })
    const lenient = await limitedServer({ store: new ClusterStore({ prefix: 'down2:', client }), passOnStoreError: true, logger: { error () {}, warn () {}, info () {} } })
    try {
      assert.deepEqual(await statuses(strict.port, 3), [500, 500, 500])
      assert.deepEqual(await statuses(lenient.port, 3), [200, 200, 200])
    } finally {
      await strict.close()
      await lenient.close()
    }
  })
})
