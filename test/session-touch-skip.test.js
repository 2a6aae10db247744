'use strict'

/**
 * A request that only reads its session skips the touch while the cookie's
 * expiry has moved by less than its resolution (lib/session/touch-skip.js):
 * seen with MONITOR on the shared Redis (the store's own connection only),
 * with Date mocked so "how far the expiry moved" is exact, not a race.
 */

const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const express = require('express')
const request = require('supertest')
const session = require('../middleware/session')
const { TOUCH_RESOLUTION_MS, TOUCH_FRACTION } = require('../lib/session/touch-skip')
const { REDIS_URL } = require('./helpers/redis')
const { monitoredRedisSuite } = require('./helpers/redis-monitor')

const SECRET = 'touch-skip-secret-0123456789-abcdefghijklm'

function createApp (mw) {
  const app = express()
  app.use(mw)
  app.get('/login', (req, res) => {
    req.session.user = 'zoe'
    res.end()
  })
  app.get('/read', (req, res) => res.json({ user: req.session.user || null }))
  app.get('/remember-me', (req, res) => {
    // Only the cookie changes: express-session touches (the data is unmodified), and the new maxAge must reach the store.
    req.session.cookie.maxAge = 2 * 60000
    res.json({ user: req.session.user || null })
  })
  return app
}

describe('touches skipped while the expiry moved less than its resolution', async () => {
  const suite = await monitoredRedisSuite('touchskip')
  const { options, prefix } = suite

  async function setup (sessionOptions) {
    const mw = suite.track(session(Object.assign({ store: 'redis', redis: REDIS_URL, prefix, secret: SECRET }, sessionOptions)))
    const app = createApp(mw)
    const login = await request(app).get('/login').expect(200)
    const cookie = login.headers['set-cookie'][0].split(';')[0]
    const names = async (path) => {
      let body
      const commands = await suite.watch.commandsOf(mw.store.redis, async () => {
        body = (await request(app).get(path).set('Cookie', cookie).expect(200)).body
      })
      return { commands: commands.map((args) => args[0].toUpperCase()), body }
    }
    return { mw, names, cookie }
  }
  const apps = new Map()
  /** One app per middleware, built once. */
  function app (mw) {
    if (!apps.has(mw)) apps.set(mw, createApp(mw))
    return apps.get(mw)
  }

  it('a read right after the last write sends only the GET; once the expiry moved by 1% of maxAge (under 1 s), the touch goes out', options, async (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    const maxAge = 60000
    const limit = Math.min(TOUCH_RESOLUTION_MS, maxAge * TOUCH_FRACTION)
    const { names } = await setup({ cookie: { maxAge } })
    assert.deepEqual(await names('/read'), { commands: ['GET'], body: { user: 'zoe' } })
    t.mock.timers.tick(limit - 1)
    assert.deepEqual((await names('/read')).commands, ['GET'])
    t.mock.timers.tick(1)
    assert.deepEqual((await names('/read')).commands, ['GET', 'EVALSHA'])
    // Measured from the expiry that touch stored, not from the login.
    t.mock.timers.tick(limit - 1)
    assert.deepEqual((await names('/read')).commands, ['GET'])
    t.mock.timers.tick(1)
    assert.deepEqual((await names('/read')).commands, ['GET', 'EVALSHA'])
  })

  it('with a long maxAge the resolution is 1 s, not 1% of it', options, async (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    const { names } = await setup({ cookie: { maxAge: 24 * 3600 * 1000 } })
    t.mock.timers.tick(TOUCH_RESOLUTION_MS - 1)
    assert.deepEqual((await names('/read')).commands, ['GET'])
    t.mock.timers.tick(1)
    assert.deepEqual((await names('/read')).commands, ['GET', 'EVALSHA'])
  })

  it('a cookie changed in any other field is touched at once, and the store keeps the change', options, async (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    const { mw, names, cookie } = await setup({ cookie: { maxAge: 60000 } })
    assert.deepEqual((await names('/remember-me')).commands, ['GET', 'EVALSHA'])
    const id = decodeURIComponent(cookie.split('=')[1]).slice(2).split('.')[0]
    const stored = await mw.store.get(id)
    assert.equal(stored.cookie.originalMaxAge, 2 * 60000)
    assert.equal(new Date(stored.cookie.expires).getTime(), Date.now() + 2 * 60000)
  })

  it('a browser-session cookie (no maxAge) is touched on every read: its expiry is the store\'s ttl, counted from a touch this process cannot see', options, async (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    const { names } = await setup({})
    assert.deepEqual((await names('/read')).commands, ['GET', 'EVALSHA'])
    assert.deepEqual((await names('/read')).commands, ['GET', 'EVALSHA'])
  })

  it('a session read again and again outlives its maxAge, and still lasts maxAge after the last read, less the resolution', options, async (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    const maxAge = 2000
    const limit = Math.min(TOUCH_RESOLUTION_MS, maxAge * TOUCH_FRACTION)
    const { mw, names, cookie } = await setup({ cookie: { maxAge } })
    const read = async () => (await request(app(mw)).get('/read').set('Cookie', cookie).expect(200)).body
    // 2 maxAges of reads, one every 10 ms (mocked): most touches are skipped, none lets the session lapse.
    const commands = await suite.watch.commandsOf(mw.store.redis, async () => {
      for (let i = 0; i < 2 * maxAge / 10; i++) {
        t.mock.timers.tick(10)
        assert.deepEqual(await read(), { user: 'zoe' }, `read ${i} still has the session`)
      }
    })
    const touches = commands.filter((args) => args[0].toUpperCase() === 'EVALSHA').length
    assert.ok(touches > 0 && touches <= Math.ceil(2 * maxAge / limit), `${touches} touches for ${2 * maxAge / 10} reads`)
    t.mock.timers.tick(maxAge - limit - 1)
    assert.deepEqual((await names('/read')).body, { user: 'zoe' }, 'alive maxAge after the last read, less the resolution')
    // That read touched (its expiry moved by far more than the resolution): the session ends maxAge after it.
    t.mock.timers.tick(maxAge + 1)
    assert.deepEqual((await names('/read')).body, { user: null }, 'gone once maxAge has passed since the last read')
  })
})

describe('the cookie as loaded is kept as the store returned it and described only when a touch asks', () => {
  const { Store, Cookie } = require('express-session')
  const { skipNeedlessTouches, cookieState } = require('../lib/session/touch-skip')

  /** A session as our stores return it (JSON), loaded through express-session's Store#createSession. */
  function load (store, options) {
    const stored = JSON.parse(JSON.stringify({ cookie: new Cookie(options), user: 'zoe' }))
    return { stored, session: store.createSession({ sessionID: 'sid-1', sessionStore: store }, JSON.parse(JSON.stringify(stored))) }
  }

  it('is described exactly as the Cookie express-session builds from it, whatever the cookie options', () => {
    const variants = [
      {},
      { maxAge: 60000 },
      { maxAge: 86400000, sameSite: 'strict', secure: true, domain: 'example.com', path: '/app', httpOnly: false },
      { expires: new Date(Date.now() + 5000), priority: 'high', partitioned: true, sameSite: 'none', secure: true }
    ]
    for (const options of variants) {
      const { stored, session } = load(new Store(), options)
      assert.deepStrictEqual(cookieState(stored.cookie), cookieState(session.cookie), JSON.stringify(options))
    }
  })

  it('skips the touch of a session left as loaded, and sends the touch once its cookie changed', async () => {
    const touched = []
    const store = skipNeedlessTouches(Object.assign(new Store(), {
      touch (sid, sess, cb) { touched.push(sess.cookie.sameSite || null); process.nextTick(cb, null) }
    }))
    const touch = (session) => new Promise((resolve, reject) => store.touch('sid-1', session, (err) => err ? reject(err) : resolve()))
    const { session } = load(store, { maxAge: 60000 })
    await touch(session)
    assert.deepStrictEqual(touched, [], 'nothing moved: no touch')
    session.cookie.sameSite = 'lax'
    await touch(session)
    assert.deepStrictEqual(touched, ['lax'], 'the cookie changed: touched')
    const reloaded = load(store, { maxAge: 60000, sameSite: 'lax' }).session
    reloaded.cookie.expires = new Date(Date.now() - 60000)
    await touch(reloaded)
    assert.deepStrictEqual(touched, ['lax', 'lax'], 'an expiry moved back: touched')
  })
})
