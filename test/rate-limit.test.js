'use strict'

/**
 * The rate-limit store without processes: the primary's counters (this
 * host's, and Redis's against the real Redis at REDIS_URL over fresh
 * connections), the service's request checks, and ClusterStore under the
 * real express-rate-limit (v8 and v7, test/helpers/rate-limit-versions.js),
 * its service in this process. The cluster runs (2 workers, two clusters on
 * one Redis) are in app-state-cluster.test.js.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const Redis = require('ioredis')
const { RateLimitCounters } = require('../lib/state/rate-limit-counters')
const { RedisRateLimitCounters } = require('../lib/state/rate-limit-redis')
const { createRateLimitService, RATE_OP } = require('../lib/state/rate-limit-service')
const { clientOf, LOCAL_CALLER } = require('../lib/state/client')
const { ClusterStore } = require('../rate-limit')
const { connectState } = require('../lib/state/redis-client')
const { parseRedisTarget } = require('../lib/redis/target')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
const { freePort } = require('./helpers/net')
const { whenReady } = require('../lib/state/redis-ready')
const { VERSIONS, installedMajor } = require('./helpers/rate-limit-versions')
const { serveLimited, statuses, count } = require('./helpers/rate-limit')

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

/** An express app limited to `limit` per window by `rateLimit` (one major's), on a loopback port. */
function limitedServer (rateLimit, limiterOptions) {
  return serveLimited(rateLimit(Object.assign({ windowMs: 60000, limit: 10, standardHeaders: 'draft-8', legacyHeaders: false }, limiterOptions)))
}

/** 8 requests to a server limited through `storeA`, 8 to one through `storeB`: exactly the limit (10) pass. */
async function assertLimitAcross (rateLimit, storeA, storeB) {
  const a = await limitedServer(rateLimit, { store: storeA })
  const b = await limitedServer(rateLimit, { store: storeB })
  try {
    const codes = [...await statuses(a.port, 8), ...await statuses(b.port, 8)]
    assert.equal(count(codes, 200), 10)
    assert.equal(count(codes, 429), 6)
  } finally {
    await a.close()
    await b.close()
  }
}

for (const version of VERSIONS) {
  const { rateLimit, MemoryStore } = require(version.module)

  describe(`ClusterStore under express-rate-limit ${version.label} (service in this process)`, () => {
    it(`the package under test is express-rate-limit ${version.major}`, () => {
      assert.equal(installedMajor(version.module), version.major)
    })

    it('two limiters (two servers) sharing one service let exactly `limit` through in total', async () => {
      const client = serviceOver(createRateLimitService())
      await assertLimitAcross(rateLimit, new ClusterStore({ prefix: 'shared:', client }), new ClusterStore({ prefix: 'shared:', client }))
    })

    it('control: two MemoryStores let twice the limit through', async () => {
      const a = await limitedServer(rateLimit, { store: new MemoryStore() })
      const b = await limitedServer(rateLimit, { store: new MemoryStore() })
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
      const strict = await limitedServer(rateLimit, { store: new ClusterStore({ prefix: 's:', client: silent, timeoutMs: 50 }) })
      const lenient = await limitedServer(rateLimit, { store: new ClusterStore({ prefix: 'l:', client: silent, timeoutMs: 50 }), passOnStoreError: true, logger: { error () {}, warn () {}, info () {} } })
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
}

describe('rate-limit counts in Redis', async () => {
  const options = await redisTestOptions()
  const prefix = uniquePrefix('rate-limit')
  const opened = []
  /** A primary's app-state connection as lib/state/redis-client.js opens it: { client, commands, cluster }. */
  function primaryConnection (url) {
    const connection = connectState(parseRedisTarget(url || REDIS_URL, 'redis'), 500)
    connection.client.on('error', () => {})
    opened.push(connection.client)
    return connection
  }
  function primaryCounters () {
    return new RedisRateLimitCounters(primaryConnection(), { keyPrefix: prefix })
  }
  function primaryService (url) {
    return createRateLimitService({ redis: primaryConnection(url), keyPrefix: prefix })
  }
  after(async () => {
    for (const client of opened) client.disconnect()
    if (!options.skip) await deletePrefix(prefix)
  })

  it('a burst of commands while the client connects waits on one ready listener, not one each (no leak warning)', async () => {
    const port = await freePort()
    const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true })
    client.on('error', () => {})
    try {
      assert.equal(client.status, 'wait')
      const waits = Array.from({ length: 20 }, () => whenReady(client, undefined))
      assert.equal(client.listenerCount('ready'), 1)
      // The wait's timer is unref'd (a primary has its servers to keep it alive): this test keeps itself alive.
      const alive = setInterval(() => {}, 1000)
      try {
        await Promise.all(waits)
      } finally {
        clearInterval(alive)
      }
      assert.equal(client.listenerCount('ready'), 0, 'the bounded wait ended and let go of its listener')
    } finally {
      client.disconnect()
    }
  })

  it('concurrent hits are atomic: 200 at once give 200 distinct counts and one TTL', { skip: options.skip }, async () => {
    const counters = primaryCounters()
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
    const counters = primaryCounters()
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

  for (const version of VERSIONS) {
    const { rateLimit } = require(version.module)

    it(`express-rate-limit ${version.label}: two primaries (two fresh connections) count in the same keys: exactly \`limit\` pass across both`, { skip: options.skip }, async () => {
      const hostA = serviceOver(primaryService())
      const hostB = serviceOver(primaryService())
      await assertLimitAcross(rateLimit, new ClusterStore({ prefix: `fleet-${version.label}:`, client: hostA }), new ClusterStore({ prefix: `fleet-${version.label}:`, client: hostB }))
    })

    it(`express-rate-limit ${version.label}: Redis unreachable: each call fails fast, passOnStoreError decides, nothing hangs or crashes`, async () => {
      const port = await freePort()
      const service = primaryService(`redis://127.0.0.1:${port}`)
      const client = serviceOver(service)
      const strict = await limitedServer(rateLimit, { store: new ClusterStore({ prefix: `down-${version.label}:`, client }) })
      const lenient = await limitedServer(rateLimit, { store: new ClusterStore({ prefix: `down2-${version.label}:`, client }), passOnStoreError: true, logger: { error () {}, warn () {}, info () {} } })
      try {
        assert.deepEqual(await statuses(strict.port, 3), [500, 500, 500])
        assert.deepEqual(await statuses(lenient.port, 3), [200, 200, 200])
      } finally {
        await strict.close()
        await lenient.close()
      }
    })
  }
})
