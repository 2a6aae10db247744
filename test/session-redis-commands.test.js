'use strict'

/**
 * The Redis commands one request costs, per request type, seen with MONITOR
 * on the shared Redis (only the store's own connection is counted; commands
 * a Lua script runs inside Redis are not round trips and are left out).
 * No timing: each case asserts the exact command names, in order.
 */

const { describe, it, before } = require('node:test')
const assert = require('node:assert/strict')
const express = require('express')
const request = require('supertest')
const session = require('../middleware/session')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { setSessionLogger, sessionLog } = require('../lib/session/log')
const { REDIS_URL } = require('./helpers/redis')
const { monitoredRedisSuite } = require('./helpers/redis-monitor')
const { sessionExpiringIn } = require('./helpers/session')
const { TOUCH_RESOLUTION_MS } = require('../lib/session/touch-skip')

const SECRET = 'redis-commands-secret-0123456789-abcdefghij'

/** Every route a request type needs. */
function createApp (mw) {
  const app = express()
  app.use(mw)
  app.get('/ignore', (req, res) => res.end('no session access'))
  app.get('/read', (req, res) => res.json({ n: req.session.n === undefined ? null : req.session.n }))
  app.get('/write', (req, res) => {
    req.session.n = (req.session.n || 0) + 1
    res.json({ n: req.session.n })
  })
  app.get('/save-then-end', (req, res, next) => {
    req.session.n = (req.session.n || 0) + 1
    req.session.save((err) => (err ? next(err) : res.json({ n: req.session.n })))
  })
  app.get('/destroy', (req, res, next) => {
    req.session.destroy((err) => (err ? next(err) : res.end('gone')))
  })
  return app
}

function cookieOf (res) {
  const set = (res.headers['set-cookie'] || []).find((c) => c.startsWith('connect.sid='))
  assert.ok(set, 'a session cookie was set')
  return set.split(';')[0]
}

describe('Redis commands per request', async () => {
  const suite = await monitoredRedisSuite('commands')
  const { options, prefix } = suite

  /** A session() on the shared Redis with these options, its app, and a logged-in cookie. */
  async function setup (sessionOptions) {
    const mw = suite.track(session(Object.assign({ store: 'redis', redis: REDIS_URL, prefix, secret: SECRET }, sessionOptions)))
    const app = createApp(mw)
    const cookie = cookieOf(await request(app).get('/write').expect(200))
    // One read first, so the touch script is in Redis' script cache (a cold cache costs one NOSCRIPT answer once).
    await request(app).get('/read').set('Cookie', cookie).expect(200)
    const names = async (path, withCookie = cookie) => {
      const commands = await suite.watch.commandsOf(mw.store.redis, async () => {
        const req = request(app).get(path)
        if (withCookie) req.set('Cookie', withCookie)
        await req.expect(200)
      })
      return commands.map((args) => args[0].toUpperCase())
    }
    return { mw, app, cookie, names }
  }

  it('first visit, no cookie, saveUninitialized false: nothing for a route that ignores the session or only reads it; one SET once it writes', options, async (t) => {
    const { names } = await setup({ cookie: { maxAge: 60000 } })
    assert.deepEqual(await names('/ignore', null), [])
    assert.deepEqual(await names('/read', null), [])
    assert.deepEqual(await names('/write', null), ['SET'])
  })

  it('first visit, no cookie, saveUninitialized true: one SET', options, async () => {
    const { names } = await setup({ saveUninitialized: true, cookie: { maxAge: 60000 } })
    assert.deepEqual(await names('/read', null), ['SET'])
  })

  it('with a cookie: a read is GET + one touch script (GET alone while the expiry moved less than its resolution), a write GET + SET, a destroy GET + DEL', options, async (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    const { names } = await setup({ cookie: { maxAge: 60000 } })
    assert.deepEqual(await names('/read'), ['GET'])
    t.mock.timers.tick(TOUCH_RESOLUTION_MS)
    assert.deepEqual(await names('/read'), ['GET', 'EVALSHA'])
    assert.deepEqual(await names('/write'), ['GET', 'SET'])
    assert.deepEqual(await names('/destroy'), ['GET', 'DEL'])
    // The session is gone now: the cookie costs one GET, and the fresh, unmodified session is not stored.
    assert.deepEqual(await names('/read'), ['GET'])
  })

  it('a route that saves explicitly before ending: no touch after that SET', options, async () => {
    const { names } = await setup({ cookie: { maxAge: 60000 } })
    assert.deepEqual(await names('/save-then-end'), ['GET', 'SET'])
  })

  it('rolling: true costs the same as the default', options, async (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    const { names } = await setup({ rolling: true, cookie: { maxAge: 60000 } })
    assert.deepEqual(await names('/read'), ['GET'])
    t.mock.timers.tick(TOUCH_RESOLUTION_MS)
    assert.deepEqual(await names('/read'), ['GET', 'EVALSHA'])
    assert.deepEqual(await names('/write'), ['GET', 'SET'])
  })

  it('a browser-session cookie (no maxAge): a read is GET + one touch script', options, async () => {
    const { names } = await setup({})
    assert.deepEqual(await names('/read'), ['GET', 'EVALSHA'])
    assert.deepEqual(await names('/write'), ['GET', 'SET'])
  })
})

describe('Redis touch in one round trip keeps its semantics', async () => {
  const suite = await monitoredRedisSuite('touch1')
  const { options, prefix } = suite
  let store
  before(async () => {
    if (options.skip) return
    store = suite.track(new ClusterizeRedisStore({ redis: REDIS_URL, prefix }))
    if (store.redis.status !== 'ready') await new Promise((resolve) => store.redis.once('ready', resolve))
  })
  const sid = (label) => `${label}-${Math.random().toString(36).slice(2)}`
  const names = (run) => suite.watch.commandsOf(store.redis, run).then((list) => list.map((args) => args[0].toUpperCase()))
  const quietly = async (run) => {
    const previous = sessionLog()
    setSessionLogger({ debug () {}, info () {}, warn () {}, error () {} })
    try { return await run() } finally { setSessionLogger(previous) }
  }

  it('the rest of the record stays byte for byte (no JSON round trip in Lua: big integers, empty arrays, escapes)', options, async () => {
    const id = sid('bytes')
    const first = sessionExpiringIn(60000)
    const rest = ',"big":12345678901234567890,"empty":[],"obj":{},"s":"\\u00e9\\/\\"}{","n":1.5e-7}'
    await store.redis.set(prefix + id, JSON.stringify(first).slice(0, -1) + rest, 'PX', 60000)
    await store.touch(id, sessionExpiringIn(120000)) // script cache warm-up on a fresh Redis
    const later = sessionExpiringIn(180000)
    assert.deepEqual(await names(() => store.touch(id, later)), ['EVALSHA'])
    assert.equal(await store.redis.get(prefix + id), '{"cookie":' + JSON.stringify(later.cookie) + rest)
    const pttl = await store.redis.pttl(prefix + id)
    assert.ok(pttl > 170000 && pttl <= 180000, `PTTL ${pttl} follows the new cookie`)
  })

  it('a record whose cookie express-session cannot use is not made readable by a touch', options, async () => {
    const id = sid('bad-cookie')
    const bad = sessionExpiringIn(60000, { n: 1 })
    bad.cookie.sameSite = 'sideways'
    await store.redis.set(prefix + id, JSON.stringify(bad), 'PX', 60000)
    assert.deepEqual(await names(() => store.touch(id, sessionExpiringIn(120000, { n: 1 }))), ['EVALSHA', 'PEXPIRE'])
    assert.equal(await store.redis.get(prefix + id), JSON.stringify(bad))
    assert.equal(await quietly(() => store.get(id)), null)
  })

  it('a record whose cookie has expired, still in Redis, is left as is', options, async () => {
    const id = sid('expired-cookie')
    const old = sessionExpiringIn(-1000, { n: 1 })
    await store.redis.set(prefix + id, JSON.stringify(old), 'PX', 60000)
    assert.deepEqual(await names(() => store.touch(id, sessionExpiringIn(120000, { n: 1 }))), ['EVALSHA'])
    assert.equal(await store.redis.get(prefix + id), JSON.stringify(old))
    assert.equal(await store.get(id), null)
  })

  it('a record not shaped as JSON.stringify writes sessions is refreshed the careful way', options, async () => {
    const id = sid('cookie-last')
    const stored = sessionExpiringIn(60000)
    await store.redis.set(prefix + id, JSON.stringify({ n: 1, cookie: stored.cookie }), 'PX', 60000)
    const later = sessionExpiringIn(120000)
    assert.deepEqual(await names(() => store.touch(id, later)), ['EVALSHA', 'EVAL'])
    const back = await store.get(id)
    assert.equal(back.n, 1)
    assert.equal(back.cookie.expires, later.cookie.expires)
  })

  it('a touch of the object just saved is skipped while it moves the expiry less than a second, not beyond', options, async () => {
    const id = sid('after-set')
    const sess = sessionExpiringIn(60000, { n: 1 })
    await store.set(id, sess)
    sess.cookie.expires = new Date(Date.now() + 60000).toISOString()
    assert.deepEqual(await names(() => store.touch(id, sess)), [])
    sess.cookie.expires = new Date(Date.now() + 62000).toISOString()
    assert.deepEqual(await names(() => store.touch(id, sess)), ['EVALSHA'])
    assert.equal((await store.get(id)).cookie.expires, sess.cookie.expires)
    // Another object with the same data is not the one saved: touched.
    assert.deepEqual(await names(() => store.touch(id, sessionExpiringIn(60000, { n: 1 }))), ['EVALSHA'])
  })
})
