'use strict'

/**
 * Redis-specific behaviour: the session key exists with a TTL matching the
 * cookie; a Redis stopped mid-run gives 503s with the reason, and when it is
 * started again sessions work with no app restart. The stop/start tests use a
 * private redis-server on a free loopback port (killed by PID), never the
 * shared one.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const request = require('supertest')
const Redis = require('ioredis')
const session = require('../middleware/session')
const { createSessionApp } = require('./fixtures/session-app')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix, privateRedis } = require('./helpers/redis')
const { sessionExpiringIn } = require('./helpers/session')
const { eventuallyPasses } = require('./helpers/wait')

const SECRET = 'redis-test-secret-0123456789-abcdefghij'

function sidOf (res) {
  const cookie = (res.headers['set-cookie'] || []).find((c) => c.startsWith('connect.sid='))
  assert.ok(cookie, 'a session cookie was set')
  const value = decodeURIComponent(cookie.split(';')[0].slice('connect.sid='.length))
  return value.slice(2, value.lastIndexOf('.'))
}

describe('Redis store keys', async () => {
  const options = await redisTestOptions()
  const prefix = uniquePrefix('keys')
  let client
  const opened = []

  before(() => {
    if (options.skip) return
    client = new Redis(REDIS_URL)
  })
  after(async () => {
    for (const mw of opened) await mw.close()
    if (client) {
      try {
        await deletePrefix(prefix)
      } finally {
        client.disconnect()
      }
    }
  })

  it('the session key exists with a TTL matching the cookie maxAge', options, async () => {
    const mw = session({ store: 'redis', redis: REDIS_URL, prefix, secret: SECRET, cookie: { maxAge: 10 * 60 * 1000 } })
    opened.push(mw)
    const res = await request(createSessionApp(mw)).post('/login?user=frank').expect(200)
    const key = prefix + sidOf(res)
    const stored = JSON.parse(await client.get(key))
    assert.equal(stored.user.name, 'frank')
    const ttl = await client.ttl(key)
    assert.ok(ttl > 590 && ttl <= 600, `TTL ${ttl}s matches the 600 s cookie`)
  })

  it('a prefix is matched literally: glob characters in it do not reach another prefix\'s sessions', options, async () => {
    // Unescaped, SCAN MATCH "app[12]:*" also matches "app1:..." and "app2:...".
    const glob = new ClusterizeRedisStore({ redis: REDIS_URL, prefix: prefix + 'app[12]:' })
    const plain = new ClusterizeRedisStore({ redis: REDIS_URL, prefix: prefix + 'app1:' })
    try {
      await plain.set('neighbour', sessionExpiringIn(60000, { n: 1 }))
      await glob.set('mine', sessionExpiringIn(60000, { n: 2 }))
      assert.equal(await glob.length(), 1)
      assert.deepEqual((await glob.all()).map((sess) => sess.id), ['mine'])
      await glob.clear()
      assert.equal(await glob.length(), 0)
      assert.equal((await plain.get('neighbour')).n, 1, 'clear left the other prefix alone')
    } finally {
      await glob.close()
      await plain.close()
    }
  })

  it('length, all and clear handle more sessions than one MGET or DEL batch', options, async () => {
    const store = new ClusterizeRedisStore({ redis: REDIS_URL, prefix: prefix + 'many:' })
    try {
      const count = 1234
      await Promise.all(Array.from({ length: count }, (_, i) => store.set(`s${i}`, sessionExpiringIn(60000, { i }))))
      assert.equal(await store.length(), count)
      const all = await store.all()
      assert.equal(all.length, count)
      assert.ok(all.every((sess) => sess.id === `s${sess.i}`), 'each session carries its own id')
      await store.clear()
      assert.equal(await store.length(), 0)
    } finally {
      await store.close()
    }
  })

  it('a browser-session cookie gets the default TTL of one day', options, async () => {
    const mw = session({ store: 'redis', redis: REDIS_URL, prefix, secret: SECRET })
    opened.push(mw)
    const res = await request(createSessionApp(mw)).post('/login').expect(200)
    const ttl = await client.ttl(prefix + sidOf(res))
    assert.ok(ttl > 86390 && ttl <= 86400, `TTL ${ttl}s is one day`)
  })

  it('the prefix option is honoured and the session round-trips through a user-supplied ioredis client', options, async () => {
    const own = new Redis(REDIS_URL)
    try {
      const mw = session({ store: 'redis', redis: own, prefix: prefix + 'own:', secret: SECRET })
      opened.push(mw)
      const agent = request.agent(createSessionApp(mw))
      const res = await agent.post('/login?user=gina').expect(200)
      assert.equal(await client.exists(prefix + 'own:' + sidOf(res)), 1)
      assert.equal((await agent.get('/me').expect(200)).body.user, 'gina')
      await mw.close()
      assert.equal(own.status, 'ready', 'a client the user passed in is not closed by us')
    } finally {
      own.disconnect()
    }
  })
})

describe('Redis stopped mid-run and started again', async () => {
  let redis
  let mw
  let app

  before(async () => {
    redis = await privateRedis()
    await redis.start()
    mw = session({ store: 'redis', redis: redis.url, secret: SECRET, timeoutMs: 500 })
    app = createSessionApp(mw)
  })
  after(async () => {
    if (mw) await mw.close()
    if (redis) await redis.stop()
  })

  it('works, then 503s with the reason while Redis is down, then works again with no restart', async () => {
    const agent = request.agent(app)
    await agent.post('/login?user=hank').expect(200)
    assert.equal((await agent.get('/me').expect(200)).body.user, 'hank')

    await redis.stop()
    const down = await eventuallyPasses(async () => {
      const res = await agent.get('/me')
      assert.equal(res.status, 503)
      return res
    }, { timeoutMs: 5000 })
    assert.match(down.body.error, /^session store unavailable: redis: /)
    assert.ok(down.headers['retry-after'])
    const fresh = await request(app).post('/login?user=ivy')
    assert.equal(fresh.status, 503, 'a new visitor gets 503 too, not a session that will not be saved')
    assert.equal(session.sessionStatus().available, false)

    await redis.start()
    const back = request.agent(app)
    await eventuallyPasses(() => back.post('/login?user=jade').expect(200), { timeoutMs: 10000 })
    assert.equal((await back.get('/me').expect(200)).body.user, 'jade')
    assert.deepEqual(session.sessionStatus(), { store: 'redis', available: true, lastError: null })
  })
})

describe('Redis stopped and started under a 2-worker cluster', () => {
  const path = require('path')
  const { startCluster } = require('./helpers/cluster')
  let redis
  let cluster

  before(async () => {
    redis = await privateRedis()
    await redis.start()
    cluster = await startCluster(path.join(__dirname, 'fixtures', 'session-cluster.js'), {
      env: {
        CZ_SESSION_OPTIONS: JSON.stringify({ store: 'redis', redis: redis.url, timeoutMs: 500 }),
        CZ_TEST_OPTIONS: JSON.stringify({ probes: { port: 0 }, health: { heartbeatMs: 200 } })
      }
    })
  })
  after(async () => {
    if (cluster) await cluster.stop()
    if (redis) await redis.stop()
  })

  it('starts with no "unavailable" alarm while the first connection is made', async () => {
    // Workers report their store in every heartbeat (200 ms): wait until both have, then check the log.
    await eventuallyPasses(async () => {
      const stats = JSON.parse((await cluster.probe('/stats')).body)
      assert.equal(stats.workers.length, 2)
      for (const w of stats.workers) assert.deepEqual(w.session, { store: 'redis', available: true, lastError: null })
    }, { timeoutMs: 10000 })
    assert.doesNotMatch(cluster.output, /unavailable/i)
  })

  it('every worker answers 503 with the reason while Redis is down, and recovers by itself', async () => {
    const login = await cluster.get('/login?user=kim', { method: 'POST' })
    assert.equal(login.status, 200, login.body)
    await redis.stop()
    await eventuallyPasses(async () => {
      // fresh connections: round robin puts consecutive requests on both workers
      for (let i = 0; i < 4; i++) {
        const res = await cluster.get('/count')
        assert.equal(res.status, 503, res.body)
        assert.match(res.json.error, /^session store unavailable: redis: /)
      }
    }, { timeoutMs: 5000 })
    // The primary learns it from heartbeats: /ready names the reason, the log says it.
    await eventuallyPasses(async () => {
      const ready = await cluster.probe('/ready')
      assert.equal(ready.status, 200)
      assert.match(ready.body, /^ready, degraded: session store redis unavailable: /)
    }, { timeoutMs: 5000 })
    assert.match(cluster.output, /session store redis unavailable: .*session requests get 503/)
    await redis.start()
    const seen = new Set()
    await eventuallyPasses(async () => {
      const res = await cluster.get('/login?user=lee', { method: 'POST' })
      assert.equal(res.status, 200, res.body)
      seen.add(res.json.pid)
      assert.equal(seen.size, 2, 'both workers recovered')
    }, { timeoutMs: 15000 })
    await eventuallyPasses(async () => {
      assert.equal((await cluster.probe('/ready')).body, 'ready\n')
    }, { timeoutMs: 5000 })
  })
})
