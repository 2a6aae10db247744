'use strict'

/**
 * session() middleware in one process (supertest + express 5): security
 * defaults, the production secret check, garbage and tampered cookies, the
 * 'memory' store refused with workers, and 503 (never a silent empty session)
 * when the store cannot answer.
 */

const { describe, it, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const request = require('supertest')
const expressSession = require('express-session')
const session = require('../middleware/session')
const { createSessionApp } = require('./fixtures/session-app')
const { privateRedis } = require('./helpers/redis')

const SECRET = 'test-secret-that-is-long-enough-0123456789'
const opened = []

function make (options) {
  const mw = session(options)
  opened.push(mw)
  return mw
}

/** Run fn with env vars set, restoring them afterwards. */
function withEnv (vars, fn) {
  const saved = {}
  for (const key of Object.keys(vars)) {
    saved[key] = process.env[key]
    if (vars[key] === undefined) delete process.env[key]
    else process.env[key] = vars[key]
  }
  try {
    return fn()
  } finally {
    for (const key of Object.keys(saved)) {
      if (saved[key] === undefined) delete process.env[key]
      else process.env[key] = saved[key]
    }
  }
}

function cookieOf (res) {
  const header = res.headers['set-cookie']
  return header ? header.find((c) => c.startsWith('connect.sid=')) : undefined
}

afterEach(async () => {
  while (opened.length) await opened.pop().close()
})

describe('security defaults', () => {
  it('cookie is HttpOnly and SameSite=Lax, not Secure outside production', async () => {
    const app = createSessionApp(make({ store: 'memory', secret: SECRET }))
    const res = await request(app).post('/login').expect(200)
    const cookie = cookieOf(res)
    assert.ok(cookie, 'a session cookie is set on login')
    assert.match(cookie, /HttpOnly/)
    assert.match(cookie, /SameSite=Lax/)
    assert.doesNotMatch(cookie, /Secure/)
  })

  it('saveUninitialized false: no cookie for a request that does not touch the session', async () => {
    const app = createSessionApp(make({ store: 'memory', secret: SECRET }))
    const res = await request(app).get('/me').expect(401)
    assert.equal(cookieOf(res), undefined)
  })

  it('resave false: an unmodified session is not written back', async () => {
    const mw = make({ store: 'memory', secret: SECRET })
    const app = createSessionApp(mw)
    const agent = request.agent(app)
    await agent.post('/login').expect(200)
    let writes = 0
    const set = mw.store.set
    mw.store.set = function countingSet (...args) { writes++; return set.apply(this, args) }
    await agent.get('/session-undefined').expect(200, { hasSession: true })
    assert.equal(writes, 0)
    await agent.get('/count').expect(200)
    assert.equal(writes, 1)
  })

  it('explicit options win over the defaults', async () => {
    const app = createSessionApp(make({ store: 'memory', secret: SECRET, saveUninitialized: true, cookie: { sameSite: 'strict', httpOnly: false } }))
    const res = await request(app).get('/session-undefined').expect(200)
    const cookie = cookieOf(res)
    assert.ok(cookie, 'saveUninitialized: true sets a cookie on the first request')
    assert.match(cookie, /SameSite=Strict/)
    assert.doesNotMatch(cookie, /HttpOnly/)
  })

  it('a cookie option function still gets the defaults', async () => {
    const app = createSessionApp(make({ store: 'memory', secret: SECRET, cookie: () => ({ maxAge: 60000 }) }))
    const cookie = cookieOf(await request(app).post('/login').expect(200))
    assert.match(cookie, /HttpOnly/)
    assert.match(cookie, /SameSite=Lax/)
    assert.match(cookie, /Expires=/)
  })

  it('unknown options are refused, naming the accepted ones', () => {
    assert.throws(() => session({ store: 'memory', secret: SECRET, maxAge: 1 }), /unknown option "maxAge".*cookie/)
    assert.throws(() => session({ store: 'mongo', secret: SECRET }), /store.*'auto', 'redis', 'cluster', 'memory'/)
  })
})

describe('secret', () => {
  it('production: a missing secret is a startup error', () => {
    withEnv({ NODE_ENV: 'production', SESSION_SECRET: undefined }, () => {
      assert.throws(() => session({ store: 'memory' }), /secret.*required in production/)
    })
  })

  it('production: a secret shorter than 32 characters is a startup error', () => {
    withEnv({ NODE_ENV: 'production', SESSION_SECRET: undefined }, () => {
      assert.throws(() => session({ store: 'memory', secret: 'short' }), /at least 32 characters/)
      assert.throws(() => session({ store: 'memory', secret: [SECRET, 'short'] }), /at least 32 characters/)
    })
    withEnv({ NODE_ENV: 'production', SESSION_SECRET: 'x'.repeat(31) }, () => {
      assert.throws(() => session({ store: 'memory' }), /SESSION_SECRET.*at least 32/)
    })
  })

  it('production: SESSION_SECRET is used, and the cookie is Secure (sent over https behind trust proxy)', async () => {
    await withEnv({ NODE_ENV: 'production', SESSION_SECRET: SECRET }, async () => {
      const app = createSessionApp(make({ store: 'memory' }))
      const overHttps = await request(app).post('/login').set('X-Forwarded-Proto', 'https').expect(200)
      assert.match(cookieOf(overHttps), /Secure/)
      const overHttp = await request(app).post('/login').expect(200)
      assert.equal(cookieOf(overHttp), undefined, 'a Secure cookie is never sent over plain http')
    })
  })

  it('several workers without a secret: a clear startup error', () => {
    withEnv({ NODE_ENV: 'development', SESSION_SECRET: undefined, CLUSTERIZE_WORKERS: '2', CLUSTERIZE_DEV_SECRET: undefined }, () => {
      assert.throws(() => session({ store: 'cluster' }), /same secret.*SESSION_SECRET/)
    })
  })

  it('single process without a secret: works (a random per-process secret)', async () => {
    await withEnv({ NODE_ENV: 'development', SESSION_SECRET: undefined, CLUSTERIZE_WORKERS: undefined }, async () => {
      const app = createSessionApp(make({ store: 'memory' }))
      const agent = request.agent(app)
      await agent.post('/login?user=bob').expect(200)
      assert.equal((await agent.get('/me').expect(200)).body.user, 'bob')
    })
  })
})

describe('garbage and tampered cookies get a fresh session, never an error', () => {
  const bad = [
    'connect.sid=garbage',
    'connect.sid=s%3Aabc.def',
    'connect.sid=%E0%A4%A',
    'connect.sid=s:' + 'A'.repeat(5000),
    'connect.sid=; connect.sid=s%3A',
    'connect.sid=s%3A%00%01%02.%FF',
    '=;;;==connect.sid'
  ]
  for (const cookie of bad) {
    it(JSON.stringify(cookie.slice(0, 40)), async () => {
      const app = createSessionApp(make({ store: 'memory', secret: SECRET }))
      const res = await request(app).get('/count').set('Cookie', cookie).expect(200)
      assert.equal(res.body.visits, 1)
      assert.ok(cookieOf(res), 'a new session cookie is issued')
    })
  }

  it('a cookie signed with another secret, or with a modified id, is a stranger', async () => {
    const app = createSessionApp(make({ store: 'memory', secret: SECRET }))
    const agent = request.agent(app)
    const login = await agent.post('/login?user=carol').expect(200)
    const value = decodeURIComponent(cookieOf(login).split(';')[0].slice('connect.sid='.length))
    const [sid, sig] = value.slice(2).split('.')
    const flipped = sid.slice(0, -1) + (sid.endsWith('a') ? 'b' : 'a')
    await request(app).get('/me').set('Cookie', `connect.sid=${encodeURIComponent(`s:${flipped}.${sig}`)}`).expect(401)
    const other = createSessionApp(make({ store: 'memory', secret: 'another-secret-also-long-enough-000000' }))
    await request(other).get('/me').set('Cookie', cookieOf(login).split(';')[0]).expect(401)
    assert.equal((await agent.get('/me').expect(200)).body.user, 'carol')
  })
})

describe("store 'memory'", () => {
  it('is refused when more than one worker runs, saying why', () => {
    withEnv({ CLUSTERIZE_WORKERS: '2' }, () => {
      assert.throws(() => session({ store: 'memory', secret: SECRET }), (err) => {
        assert.match(err.message, /store 'memory'/)
        assert.match(err.message, /2 workers/)
        assert.match(err.message, /stranger on the next/)
        return true
      })
    })
  })

  it('is accepted in single-process mode (CLUSTERIZE_WORKERS=0 or unset)', () => {
    withEnv({ CLUSTERIZE_WORKERS: '0' }, () => {
      const mw = make({ store: 'memory', secret: SECRET })
      assert.ok(mw.store instanceof expressSession.MemoryStore)
    })
  })
})

describe('store auto', () => {
  it('is the cluster store without redis/REDIS_URL, Redis with them', async () => {
    await withEnv({ REDIS_URL: undefined }, () => {
      assert.equal(make({ secret: SECRET }).storeKind, 'cluster')
    })
    const redis = await privateRedis()
    await withEnv({ REDIS_URL: redis.url }, () => {
      assert.equal(make({ secret: SECRET }).storeKind, 'redis')
    })
    assert.equal(make({ secret: SECRET, redis: redis.url }).storeKind, 'redis')
  })

  it("store 'redis' without a target is a startup error", () => {
    withEnv({ REDIS_URL: undefined }, () => {
      assert.throws(() => session({ store: 'redis', secret: SECRET }), /needs the redis option.*REDIS_URL/)
    })
  })
})

describe('store down: 503, never a silent empty session', () => {
  it('Redis unreachable: 503 JSON with the reason and Retry-After; a request without session is unaffected', async () => {
    const redis = await privateRedis() // a free port, nothing started on it
    const mw = make({ store: 'redis', redis: redis.url, secret: SECRET, timeoutMs: 300 })
    const app = createSessionApp(mw)
    const res = await request(app).get('/count').expect(503)
    assert.match(res.body.error, /^session store unavailable: redis: /)
    assert.equal(res.headers['retry-after'], '1')
    assert.match(res.headers['content-type'], /application\/json/)
    await request(app).get('/plain').expect(200)
    const status = session.sessionStatus()
    assert.equal(status.store, 'redis')
    assert.equal(status.available, false)
    assert.ok(status.lastError)
  })

  it('in production the 503 body says the store is unavailable and nothing about where it lives; the log keeps the reason', async () => {
    const redis = await privateRedis() // a free port, nothing started on it
    const lines = []
    const { setSessionLogger } = require('../lib/session/log')
    setSessionLogger({ warn: (msg) => lines.push(msg), error: (msg) => lines.push(msg), info () {}, debug () {} })
    try {
      const mw = withEnv({ NODE_ENV: 'production' }, () => make({ store: 'redis', redis: redis.url, secret: SECRET, timeoutMs: 300 }))
      const app = createSessionApp(mw)
      for (let i = 0; i < 3; i++) {
        const res = await request(app).get('/count').expect(503)
        assert.deepEqual(res.body, { error: 'session store unavailable' })
        assert.doesNotMatch(res.text, new RegExp(String(redis.port)))
        assert.equal(res.headers['retry-after'], '1')
      }
      const about = lines.filter((line) => /session store unavailable: redis/.test(line))
      assert.equal(about.length, 1, 'one log line for the outage, not one per request: ' + JSON.stringify(lines))
      assert.match(about[0], new RegExp(String(redis.port)), 'the log keeps where the store lives')
    } finally {
      setSessionLogger(null)
    }
  })

  it("a store that emits 'disconnect' gets 503 (express-session alone would give req.session undefined), and works again on 'connect'", async () => {
    const store = new expressSession.MemoryStore()
    const app = createSessionApp(make({ store, secret: SECRET }))
    store.emit('disconnect')
    const res = await request(app).get('/session-undefined').expect(503)
    assert.match(res.body.error, /session store unavailable/)
    store.emit('connect')
    await request(app).get('/session-undefined').expect(200, { hasSession: true })
  })

  it('a store whose get fails: 503 with the reason, not a fresh session', async () => {
    class FailingStore extends expressSession.Store {
      get (sid, cb) { cb(new Error('backend exploded')) }
      set (sid, sess, cb) { cb() }
      destroy (sid, cb) { cb() }
    }
    const good = new expressSession.MemoryStore()
    const agent = request.agent(createSessionApp(make({ store: good, secret: SECRET })))
    const login = await agent.post('/login').expect(200)
    const app = createSessionApp(make({ store: new FailingStore(), secret: SECRET }))
    const res = await request(app).get('/count').set('Cookie', cookieOf(login).split(';')[0]).expect(503)
    assert.equal(res.body.error, 'session store unavailable: FailingStore store: backend exploded')
  })

  it('status answers for the open stores', () => {
    const mw = make({ store: 'memory', secret: SECRET })
    assert.ok(mw)
    assert.deepEqual(session.sessionStatus(), { store: 'memory', available: true, lastError: null })
  })
})

describe('cluster store in single-process mode (the bus answers locally)', () => {
  it('login, profile, logout', async () => {
    const app = createSessionApp(make({ store: 'cluster', secret: SECRET }))
    const agent = request.agent(app)
    await agent.post('/login?user=dave').expect(200)
    assert.deepEqual((await agent.get('/me').expect(200)).body.user, 'dave')
    assert.equal((await agent.get('/me').expect(200)).body.visits, 2)
    await agent.post('/logout').expect(200)
    await agent.get('/me').expect(401)
  })
})
