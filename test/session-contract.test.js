'use strict'

/**
 * express-session's Store contract, written for our stores and run on both:
 * the cluster store (its backend in this process, reached as over IPC) and
 * the Redis store on the real Redis at REDIS_URL (a unique key prefix per
 * run, deleted afterwards). Each store callback runs exactly once; an
 * exception the app throws inside one surfaces as itself.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const { execFile } = require('child_process')
const { promisify } = require('util')
const { ClusterStore } = require('../lib/session/cluster-store')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { SessionStoreUnavailableError } = require('../lib/session/unavailable')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
const { sessionExpiringIn } = require('./helpers/session')
const request = require('supertest')
const session = require('../middleware/session')
const { TOUCH_RESOLUTION_MS, TOUCH_FRACTION } = require('../lib/session/touch-skip')
const { sessionLog, setSessionLogger } = require('../lib/session/log')
const { createSessionApp } = require('./fixtures/session-app')
const { startCluster } = require('./helpers/cluster')

const execFileP = promisify(execFile)
const THROWS_FIXTURE = path.join(__dirname, 'fixtures', 'store-callback-throws.js')
const OPS = ['get', 'set', 'touch', 'destroy', 'length', 'all', 'clear']

/**
 * Run one store operation in a child process with a callback that throws.
 * @returns {Promise<{ calls: object[], uncaught: object[], rejections: object[] }>}
 */
async function callbackThrows (kind, op, prefix) {
  const args = [THROWS_FIXTURE, kind, op]
  if (kind === 'redis') args.push(REDIS_URL, prefix)
  const { stdout } = await execFileP(process.execPath, args, { timeout: 20000 })
  return JSON.parse(stdout.trim().split('\n').pop())
}

const sleep = promisify(setTimeout)

/** Wait until the wall clock is past `iso` plus `marginMs` (default a few ms, for the store's own clock). */
async function untilPast (iso, marginMs = 5) {
  const at = new Date(iso).getTime() + marginMs
  while (Date.now() <= at) await sleep(at - Date.now() + 1)
}

/** Capture what the session stores log; restore() puts the previous logger back. */
function captureSessionLog () {
  const lines = []
  const previous = sessionLog()
  const record = (level) => (msg, fields) => lines.push({ level, msg, fields })
  setSessionLogger({ debug () {}, info: record('info'), warn: record('warn'), error: record('error') })
  lines.restore = () => setSessionLogger(previous)
  return lines
}

/**
 * Call store[op](...args, cb) and collect every callback call until a while
 * after the first one (a second call would come right after it).
 * @returns {Promise<{ sync: boolean, list: any[][] }>}
 */
function callsOf (store, op, args) {
  return new Promise((resolve) => {
    const list = []
    let returned = false
    let sync = false
    store[op](...args, function callback (...answer) {
      if (!returned) sync = true
      list.push(answer)
      if (list.length === 1) setTimeout(() => resolve({ sync, list }), 100)
    })
    returned = true
  })
}

function promised (store) {
  const out = {}
  for (const op of OPS) out[op] = promisify(store[op]).bind(store)
  return out
}

/**
 * The contract suite for one store.
 * @param {string} name
 * @param {{ kind: 'cluster'|'redis', prefix?: string, sessionOptions: object,
 *   open: () => Promise<{ store: object, close: () => Promise<void> }>,
 *   openUnavailable: () => Promise<{ store: object, close: () => Promise<void> }>,
 *   plant: (store: object, sid: string, raw: string) => Promise<*> }} target
 *   sessionOptions: what session() needs to use this store; plant writes a raw record
 * @param {object} [options] node:test suite options (skip)
 */
function contract (name, target, options) {
  describe(`session store contract: ${name}`, options || {}, () => {
    let opened
    let s
    before(async () => {
      opened = await target.open()
      s = promised(opened.store)
    })
    after(async () => { if (opened) await opened.close() })
    const sid = (label) => `${label}-${Math.random().toString(36).slice(2)}`

    it('get of an unknown id answers null; destroy of an unknown id succeeds', async () => {
      assert.equal(await s.get(sid('unknown')), null)
      await s.destroy(sid('unknown'))
    })

    it('a set with an expired cookie removes the stored session', async () => {
      const id = sid('set-expired')
      await s.set(id, sessionExpiringIn(60000, { n: 1 }))
      await s.set(id, sessionExpiringIn(-1, { n: 2 }))
      assert.equal(await s.get(id), null)
    })

    it('length and all leave out expired sessions', async () => {
      await s.clear()
      const live = sid('live')
      // 300 ms: a store counting whole seconds keeps it a full second; a
      // millisecond store has dropped it well before 300 + 300 ms.
      const dying = sessionExpiringIn(300, { n: 2 })
      await s.set(live, sessionExpiringIn(60000, { n: 1 }))
      await s.set(sid('dying'), dying)
      await untilPast(dying.cookie.expires, 300)
      assert.equal(await s.length(), 1)
      assert.deepEqual((await s.all()).map((sess) => sess.id), [live])
      await s.clear()
      assert.equal(await s.length(), 0)
    })

    it('every operation calls back exactly once on success, asynchronously', async () => {
      const id = sid('once')
      const sess = sessionExpiringIn(60000, { n: 1 })
      for (const [op, args] of [['set', [id, sess]], ['get', [id]], ['touch', [id, sess]], ['length', []], ['all', []], ['destroy', [id]], ['clear', []]]) {
        const calls = await callsOf(opened.store, op, args)
        assert.equal(calls.sync, false, `${op} called back synchronously`)
        assert.equal(calls.list.length, 1, `${op} called back ${calls.list.length} times`)
        assert.equal(calls.list[0][0], null, `${op}: ${calls.list[0][0]}`)
      }
    })

    it('without a callback, every operation returns a promise with the same answer', async () => {
      const store = opened.store
      await store.clear()
      const id = sid('promise')
      const sess = sessionExpiringIn(60000, { n: 1 })
      await store.set(id, sess)
      assert.equal((await store.get(id)).n, 1)
      await store.touch(id, sessionExpiringIn(120000, { n: 1 }))
      assert.equal(await store.length(), 1)
      assert.deepEqual((await store.all()).map((one) => [one.id, one.n]), [[id, 1]])
      await store.destroy(id)
      assert.equal(await store.get(id), null)
      await store.set(id, sess)
      await store.clear()
      assert.equal(await store.length(), 0)
    })

    it('without a callback, a failed operation rejects its promise with the 503 error', async () => {
      const down = await target.openUnavailable()
      try {
        for (const [op, args] of [['get', ['x']], ['set', ['x', sessionExpiringIn(60000)]], ['all', []], ['length', []]]) {
          await assert.rejects(down.store[op](...args), SessionStoreUnavailableError, op)
        }
      } finally {
        await down.close()
      }
    })

    it('when the store cannot answer, every operation calls back once with a 503 SessionStoreUnavailableError', async () => {
      const down = await target.openUnavailable()
      try {
        const sess = sessionExpiringIn(60000, { n: 1 })
        for (const [op, args] of [['get', ['x']], ['set', ['x', sess]], ['touch', ['x', sess]], ['destroy', ['x']], ['length', []], ['all', []], ['clear', []]]) {
          const calls = await callsOf(down.store, op, args)
          assert.equal(calls.list.length, 1, `${op} called back ${calls.list.length} times`)
          const err = calls.list[0][0]
          assert.ok(err instanceof SessionStoreUnavailableError, `${op}: ${err}`)
          assert.equal(err.status, 503)
          assert.equal(err.code, 'ERR_CLUSTERIZE_SESSION_STORE_UNAVAILABLE')
          assert.match(err.message, new RegExp(`^session store unavailable: ${target.kind}`))
        }
      } finally {
        await down.close()
      }
    })

    it('touch refreshes the stored cookie.expires, and only the cookie', async () => {
      const id = sid('touch-cookie')
      await s.set(id, sessionExpiringIn(60000, { n: 1 }))
      const later = sessionExpiringIn(120000, { n: 999 })
      await s.touch(id, later)
      const back = await s.get(id)
      assert.equal(back.cookie.expires, later.cookie.expires)
      assert.equal(back.n, 1, 'touch must not overwrite the session data')
    })

    it('a session is gone once its cookie expired (millisecond precision)', async () => {
      const id = sid('ms-expiry')
      const sess = sessionExpiringIn(5, { n: 1 })
      await s.set(id, sess)
      await untilPast(sess.cookie.expires)
      assert.equal(await s.get(id), null)
    })

    it('touch to a near expiry expires it at that millisecond', async () => {
      const id = sid('ms-touch')
      await s.set(id, sessionExpiringIn(60000, { n: 1 }))
      const soon = sessionExpiringIn(5, { n: 1 })
      await s.touch(id, soon)
      await untilPast(soon.cookie.expires)
      assert.equal(await s.get(id), null)
    })

    it('touch does not revive an expired session', async () => {
      const id = sid('no-revive')
      const sess = sessionExpiringIn(5, { n: 1 })
      await s.set(id, sess)
      await untilPast(sess.cookie.expires)
      await s.touch(id, sessionExpiringIn(60000, { n: 1 }))
      assert.equal(await s.get(id), null)
    })

    it('touch leaves an unreadable record unreadable (it never becomes a session)', async () => {
      const id = sid('touch-unreadable')
      await target.plant(opened.store, id, '{"n":')
      await s.touch(id, sessionExpiringIn(60000, { n: 1 }))
      const lines = captureSessionLog()
      try {
        assert.equal(await s.get(id), null)
        assert.equal(lines.length, 1)
      } finally {
        lines.restore()
      }
    })

    it('touch of an unknown session does not create it', async () => {
      const id = sid('touch-unknown')
      await s.touch(id, sessionExpiringIn(60000, { n: 1 }))
      assert.equal(await s.get(id), null)
    })

    it('a stored record express-session cannot inflate reads as no session, with one log line', async () => {
      const lines = captureSessionLog()
      try {
        const records = [{ n: 1 }, { cookie: null, n: 1 }, { cookie: { expires: 'not a date' } }, [1, 2], 'text']
          .map((record) => JSON.stringify(record))
          .concat(['{"cookie":{"expires":"2030-01-01T00:00:00.000Z"},"n":'])
        for (const [i, record] of records.entries()) {
          const id = sid(`uninflatable-${i}`)
          await target.plant(opened.store, id, record)
          assert.equal(await s.get(id), null, `record ${JSON.stringify(record)}`)
          assert.equal(await s.get(id), null)
        }
        assert.equal(lines.length, records.length, JSON.stringify(lines))
        for (const line of lines) {
          assert.equal(line.level, 'warn')
          assert.match(line.msg, new RegExp(`session store ${target.kind}: a stored session could not be read \\(.+\\); removed it, that visitor gets a new session`))
        }
      } finally {
        lines.restore()
      }
    })

    it('all() lists the readable sessions and skips a record express-session cannot inflate', async () => {
      await s.clear()
      const good = sid('all-good')
      await s.set(good, sessionExpiringIn(60000, { n: 1 }))
      await target.plant(opened.store, sid('all-bad'), JSON.stringify('text'))
      await target.plant(opened.store, sid('all-bad'), JSON.stringify({ n: 2 }))
      const all = await s.all()
      assert.deepEqual(all.map((sess) => [sess.id, sess.n]), [[good, 1]])
      await s.clear()
    })

    it('through session(): a request that only reads the session refreshes the stored cookie.expires', async () => {
      const express = require('express')
      const mw = session(Object.assign({ secret: 'contract-test-secret-0123456789abcdef', cookie: { maxAge: 60000 } }, target.sessionOptions))
      try {
        const app = express()
        app.use(mw)
        app.post('/login', (req, res) => { req.session.user = 'zoe'; res.end() })
        app.get('/read', (req, res) => res.json({ user: req.session.user }))
        const login = await request(app).post('/login').expect(200)
        const cookie = login.headers['set-cookie'][0].split(';')[0]
        const id = decodeURIComponent(cookie.split('=')[1]).slice(2).split('.')[0]
        const get = promisify(mw.store.get).bind(mw.store)
        const before = (await get(id)).cookie.expires
        // Past the touch's resolution (lib/session/touch-skip.js: a read that moves the expiry less is not written).
        await untilPast(new Date(new Date(before).getTime() - 60000 + Math.min(TOUCH_RESOLUTION_MS, 60000 * TOUCH_FRACTION) + 10).toISOString())
        assert.deepEqual((await request(app).get('/read').set('Cookie', cookie).expect(200)).body, { user: 'zoe' })
        await eventually(async () => {
          const stored = await get(id)
          return stored.user === 'zoe' && new Date(stored.cookie.expires) > new Date(before)
        }, { timeoutMs: 5000, what: 'the stored cookie.expires to move past ' + before })
      } finally {
        await mw.close()
      }
    })

    it('through session(): a visitor whose stored record cannot be inflated gets a fresh session, not 503', async () => {
      const lines = captureSessionLog()
      const mw = session(Object.assign({ secret: 'contract-test-secret-0123456789abcdef' }, target.sessionOptions))
      try {
        const app = createSessionApp(mw)
        const login = await request(app).post('/login?user=zoe').expect(200)
        const cookie = login.headers['set-cookie'][0].split(';')[0]
        const id = decodeURIComponent(cookie.split('=')[1]).slice(2).split('.')[0]
        assert.equal((await request(app).get('/me').set('Cookie', cookie).expect(200)).body.user, 'zoe')
        await target.plant(mw.store, id, JSON.stringify({ user: { name: 'zoe' } }))
        for (let i = 0; i < 2; i++) {
          const res = await request(app).get('/me').set('Cookie', cookie)
          assert.equal(res.status, 401, `a fresh, logged-out session, not ${res.status} ${res.text}`)
        }
        const fresh = await request(app).post('/login?user=yann').set('Cookie', cookie).expect(200)
        const next = fresh.headers['set-cookie'][0].split(';')[0]
        assert.notEqual(next, cookie)
        assert.equal((await request(app).get('/me').set('Cookie', next).expect(200)).body.user, 'yann')
        assert.equal(lines.length, 1, JSON.stringify(lines))
      } finally {
        lines.restore()
        await mw.close()
      }
    })

    for (const op of OPS) {
      it(`${op}: a callback that throws runs once, and the exception surfaces as itself`, async () => {
        const report = await callbackThrows(target.kind, op, target.prefix)
        assert.equal(report.setupError, undefined, JSON.stringify(report))
        assert.equal(report.calls.length, 1, `callback ran ${report.calls.length} times: ${JSON.stringify(report.calls)}`)
        assert.equal(report.calls[0].err, null)
        assert.deepEqual(report.rejections, [], 'no unhandledRejection')
        assert.deepEqual(report.uncaught, [{ name: 'Error', message: 'app boom' }])
      })
    }
  })
}

contract('cluster store', {
  kind: 'cluster',
  sessionOptions: { store: 'cluster' },
  open: async () => ({ store: new ClusterStore(), close: async () => {} }),
  // The primary is gone: the bus rejects every request.
  openUnavailable: async () => ({
    store: new ClusterStore({ transport: () => Promise.reject(new Error('no primary')) }),
    close: async () => {}
  }),
  plant: (store, sid, json) => promisify(store.call).call(store, { op: 'set', sid, sess: json, expires: Date.now() + 60000 })
})

describe('cluster store over IPC, in a real 2-worker cluster', () => {
  let cluster
  let cookie
  before(async () => {
    const sessionOptions = { store: 'cluster', cookie: { maxAge: 60000 } }
    cluster = await startCluster(path.join(__dirname, 'fixtures', 'session-cluster.js'), { env: { CZ_SESSION_OPTIONS: JSON.stringify(sessionOptions) } })
    const login = await cluster.get('/login?user=ines', { method: 'POST' })
    assert.equal(login.status, 200, login.body)
    cookie = login.headers['set-cookie'].find((c) => c.startsWith('connect.sid=')).split(';')[0]
  })
  after(async () => {
    if (cluster) await cluster.stop()
  })

  it('a read-only request refreshes the stored cookie.expires in the primary', async () => {
    const first = await cluster.get('/stored', { headers: { cookie } })
    assert.equal(first.status, 200, first.body)
    const before = first.json.cookie.expires
    await eventually(async () => {
      const res = await cluster.get('/stored', { headers: { cookie } })
      assert.equal(res.status, 200, res.body)
      return new Date(res.json.cookie.expires) > new Date(before)
    }, { timeoutMs: 5000, what: 'the stored cookie.expires to move past ' + before })
  })

  it('a record express-session cannot inflate gives that visitor a fresh session, never 503, and a log line', async () => {
    const corrupt = await cluster.get('/corrupt', { method: 'POST', headers: { cookie } })
    assert.equal(corrupt.status, 200, corrupt.body)
    const statuses = []
    await eventually(async () => {
      const res = await cluster.get('/me', { headers: { cookie } })
      statuses.push(res.status)
      assert.ok(res.status === 200 || res.status === 401, `status ${res.status}: ${res.body}`)
      return res.status === 401
    }, { timeoutMs: 5000, what: () => 'a fresh (logged-out) session, statuses ' + statuses.join(',') })
    await eventually(() => /WARN session store cluster: a stored session could not be read \(its cookie is undefined, not an object\)/.test(cluster.output),
      { timeoutMs: 5000, what: 'the warn line in the worker log' })
  })
})

describe('redis', async () => {
  const options = await redisTestOptions()
  const prefix = uniquePrefix('contract')
  contract('redis store', {
    kind: 'redis',
    prefix,
    sessionOptions: { store: 'redis', redis: REDIS_URL, prefix },
    plant: (store, sid, json) => store.redis.set(prefix + sid, json, 'PX', 60000),
    // Nothing listens on the port: every operation waits for the first connection, then fails.
    openUnavailable: async () => {
      const store = new ClusterizeRedisStore({ redis: `redis://127.0.0.1:${await freePort()}`, prefix, timeoutMs: 300 })
      return { store, close: () => store.close() }
    },
    open: async () => {
      const store = new ClusterizeRedisStore({ redis: REDIS_URL, prefix })
      return { store, close: async () => { await store.close(); await deletePrefix(prefix) } }
    }
  }, options)
})

describe('redis store used directly, before its first connection', async () => {
  const options = await redisTestOptions()
  const prefix = uniquePrefix('direct')
  after(() => deletePrefix(prefix))

  it('get and set right after creation wait for the connection instead of failing', options, async () => {
    const store = new ClusterizeRedisStore({ redis: REDIS_URL, prefix, timeoutMs: 5000 })
    try {
      assert.notEqual(store.redis.status, 'ready')
      const sess = { cookie: { originalMaxAge: 60000, expires: new Date(Date.now() + 60000).toISOString() }, n: 3 }
      const [missing] = await Promise.all([
        promisify(store.get).call(store, 'direct-missing'),
        promisify(store.set).call(store, 'direct-1', sess)
      ])
      assert.equal(missing, null)
      assert.equal((await promisify(store.get).call(store, 'direct-1')).n, 3)
    } finally {
      await store.close()
    }
  })

  it('without a callback, operations return promises with the same semantics', options, async () => {
    const own = prefix + 'promise:'
    const store = new ClusterizeRedisStore({ redis: REDIS_URL, prefix: own, timeoutMs: 5000 })
    const lines = captureSessionLog()
    try {
      await store.set('promise-1', sessionExpiringIn(60000, { n: 1 }))
      assert.equal((await store.get('promise-1')).n, 1)
      await store.redis.set(own + 'promise-bad', '{"n":', 'PX', 60000)
      assert.equal(await store.get('promise-bad'), null)
      assert.equal(lines.length, 1)
      assert.deepEqual((await store.all()).map((sess) => sess.id).sort(), ['promise-1'])
      assert.equal(await store.length(), 1)
      await store.destroy('promise-1')
      assert.equal(await store.get('promise-1'), null)
    } finally {
      lines.restore()
      await store.close()
    }
  })

  it('given to plain express-session, the first request gets a session', options, async () => {
    const express = require('express')
    const expressSession = require('express-session')
    const store = new ClusterizeRedisStore({ redis: REDIS_URL, prefix, timeoutMs: 5000 })
    const app = express()
    app.use(expressSession({ store, secret: 'contract-test-secret', resave: false, saveUninitialized: false }))
    app.get('/', (req, res) => {
      req.session.n = (req.session.n || 0) + 1
      res.json({ n: req.session.n })
    })
    try {
      const first = await request(app).get('/')
      assert.equal(first.status, 200, first.text)
      assert.deepEqual(first.body, { n: 1 })
      const again = await request(app).get('/').set('Cookie', first.headers['set-cookie'][0].split(';')[0])
      assert.deepEqual(again.body, { n: 2 })
    } finally {
      await store.close()
    }
  })
})
