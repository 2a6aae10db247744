'use strict'

/**
 * One store conformance suite, run against every store we ship: the cluster
 * store (its backend in this process, reached through a JSON round trip, as
 * over IPC; and through the real bus in single-process mode when available)
 * and the Redis store against the real Redis at REDIS_URL (a unique key
 * prefix per run, deleted afterwards).
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { promisify } = require('util')
const { SessionBackend } = require('../lib/session/cluster-backend')
const { ClusterStore } = require('../lib/session/cluster-store')
const { ClusterizeRedisStore } = require('../lib/session/redis-store')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
const { eventually } = require('./helpers/wait')
const { sessionExpiringIn } = require('./helpers/session')

const sleep = promisify(setTimeout)


function promised (store) {
  return {
    get: promisify(store.get).bind(store),
    set: promisify(store.set).bind(store),
    destroy: promisify(store.destroy).bind(store),
    touch: promisify(store.touch).bind(store),
    all: promisify(store.all).bind(store),
    length: promisify(store.length).bind(store),
    clear: promisify(store.clear).bind(store)
  }
}

/**
 * @param {string} name
 * @param {() => Promise<{ store: object, close: () => Promise<void> }>} open
 * @param {object} [options] node:test suite options (skip)
 */
function conformance (name, open, options) {
  describe(`session store conformance: ${name}`, options || {}, () => {
    let opened
    let s
    const sid = (label) => `${label}-${Math.random().toString(36).slice(2)}`

    before(async () => {
      opened = await open()
      s = promised(opened.store)
      await s.clear()
    })
    after(async () => {
      if (opened) {
        await s.clear()
        await opened.close()
      }
    })

    it('get of an unknown id answers null, not an error', async () => {
      assert.equal(await s.get(sid('missing')), null)
    })

    it('set then get round-trips nested objects, dates as ISO strings and unicode', async () => {
      const id = sid('roundtrip')
      const when = new Date('2024-02-29T12:34:56.789Z')
      const value = sessionExpiringIn(60000, {
        user: { id: 42, name: 'Zoë 山田 🚀', roles: ['admin', 'ops'], prefs: { theme: { dark: true, accent: null } } },
        loggedInAt: when,
        list: [1, 'two', { three: [3] }],
        empty: {},
        text: 'quote " backslash \\ newline \n tab \t nul \u0000 end'
      })
      await s.set(id, value)
      const back = await s.get(id)
      assert.deepEqual(back, JSON.parse(JSON.stringify(value)))
      assert.equal(back.loggedInAt, when.toISOString())
      assert.equal(back.user.name, 'Zoë 山田 🚀')
    })

    it('set overwrites', async () => {
      const id = sid('overwrite')
      await s.set(id, sessionExpiringIn(60000, { n: 1 }))
      await s.set(id, sessionExpiringIn(60000, { n: 2 }))
      assert.equal((await s.get(id)).n, 2)
    })

    it('destroy removes the session; destroying an unknown id is not an error', async () => {
      const id = sid('destroy')
      await s.set(id, sessionExpiringIn(60000, { n: 1 }))
      await s.destroy(id)
      assert.equal(await s.get(id), null)
      await s.destroy(sid('never-existed'))
    })

    it('a session whose cookie already expired is not stored', async () => {
      const id = sid('past')
      await s.set(id, sessionExpiringIn(-1000, { n: 1 }))
      assert.equal(await s.get(id), null)
    })

    it('expires when its cookie does', async () => {
      const id = sid('expiry')
      await s.set(id, sessionExpiringIn(300, { n: 1 }))
      assert.equal((await s.get(id)).n, 1)
      // Both stores expire in milliseconds: poll until it is gone.
      await eventually(async () => (await s.get(id)) === null, { timeoutMs: 5000, intervalMs: 20, what: 'the session to expire' })
    })

    it('touch extends the expiry', async () => {
      const id = sid('touch')
      const firstExpiry = Date.now() + 300
      await s.set(id, sessionExpiringIn(300, { n: 1 }))
      await s.touch(id, sessionExpiringIn(60000, { n: 1 }))
      // The point is the time after the first expiry: wait for that moment, not a guess.
      while (Date.now() <= firstExpiry + 50) await sleep(firstExpiry + 51 - Date.now())
      assert.equal((await s.get(id)).n, 1)
    })

    it('a browser-session cookie (no expiry) is kept with the default TTL', async () => {
      const id = sid('nocookieexpiry')
      await s.set(id, sessionExpiringIn(null, { n: 7 }))
      assert.equal((await s.get(id)).n, 7)
    })

    it('all, length and clear', async () => {
      await s.clear()
      assert.equal(await s.length(), 0)
      assert.deepEqual(await s.all(), [])
      const ids = [sid('all-a'), sid('all-b'), sid('all-c')]
      for (const [i, id] of ids.entries()) await s.set(id, sessionExpiringIn(60000, { i }))
      assert.equal(await s.length(), 3)
      const all = await s.all()
      assert.ok(Array.isArray(all))
      assert.deepEqual(all.map((x) => x.id).sort(), ids.slice().sort())
      for (const sess of all) assert.equal(sess.i, ids.indexOf(sess.id))
      await s.clear()
      assert.equal(await s.length(), 0)
      assert.equal(await s.get(ids[0]), null)
    })

    it('concurrent writes to distinct sessions all land', async () => {
      const ids = Array.from({ length: 200 }, (_, i) => sid(`concurrent-${i}`))
      await Promise.all(ids.map((id, i) => s.set(id, sessionExpiringIn(60000, { i, tag: `ünïcode-${i}` }))))
      const back = await Promise.all(ids.map((id) => s.get(id)))
      back.forEach((sess, i) => {
        assert.equal(sess.i, i)
        assert.equal(sess.tag, `ünïcode-${i}`)
      })
      await Promise.all(ids.map((id) => s.destroy(id)))
    })
  })
}

conformance('cluster store (backend through a JSON transport)', async () => {
  const backend = new SessionBackend({ sweepIntervalMs: 0 })
  const store = new ClusterStore({
    transport: (msg) => Promise.resolve().then(() => JSON.parse(JSON.stringify(backend.dispatch(JSON.parse(JSON.stringify(msg))) ?? null)))
  })
  return { store, close: async () => backend.close() }
})

conformance('cluster store (default transport outside a worker: the backend attached to the bus)', async () => {
  const store = new ClusterStore()
  return { store, close: async () => {} }
})

describe('redis store', async () => {
  const options = await redisTestOptions()
  const prefix = uniquePrefix('conformance')
  conformance('redis store (ioredis)', async () => {
    const store = new ClusterizeRedisStore({ redis: REDIS_URL, prefix })
    try {
      await new Promise((resolve, reject) => store.checkAvailable((err) => err ? reject(err) : resolve()))
    } catch (err) {
      await store.close()
      throw err
    }
    return { store, close: async () => { await store.close(); await deletePrefix(prefix) } }
  }, options)
})

describe('cluster backend: bound, eviction and sweep', () => {
  function backendAt (clock, options) {
    return new SessionBackend(Object.assign({ sweepIntervalMs: 0, now: () => clock.t }, options))
  }

  it('when full, evicts the session closest to expiry first', () => {
    const clock = { t: 1000 }
    const b = backendAt(clock, { maxSessions: 3 })
    b.set('a', '{"n":"a"}', 5000)
    b.set('b', '{"n":"b"}', 3000)
    b.set('c', '{"n":"c"}', 9000)
    b.touch('c', 2000) // now c expires first
    b.set('d', '{"n":"d"}', 8000)
    assert.equal(b.get('c'), null)
    assert.deepEqual(['a', 'b', 'd'].map((sid) => b.get(sid) !== null), [true, true, true])
    assert.equal(b.length(), 3)
    assert.equal(b.evicted, 1)
    b.set('a', '{"n":"a2"}', 6000) // overwriting an existing session never evicts
    assert.equal(b.length(), 3)
    assert.equal(b.evicted, 1)
  })

  it('when full, removes expired sessions before evicting live ones', () => {
    const clock = { t: 1000 }
    const b = backendAt(clock, { maxSessions: 2 })
    b.set('old', '{}', 1500)
    b.set('live', '{}', 9000)
    clock.t = 2000
    b.set('new', '{}', 9500)
    assert.equal(b.evicted, 0)
    assert.notEqual(b.get('live'), null)
    assert.notEqual(b.get('new'), null)
  })

  it('sweep removes exactly the expired sessions, through many rewrites', () => {
    const clock = { t: 0 }
    const b = backendAt(clock)
    const expected = new Map()
    let seed = 7
    const rand = (n) => { seed = (seed * 48271) % 2147483647; return seed % n }
    for (let i = 0; i < 20000; i++) {
      const sid = 's' + rand(500)
      const expires = 1 + rand(10000)
      if (rand(3) === 0) {
        assert.equal(b.touch(sid, expires), expected.has(sid))
        if (expected.has(sid)) expected.set(sid, expires)
      } else {
        b.set(sid, `{"i":${i}}`, expires)
        expected.set(sid, expires)
      }
    }
    assert.ok(b.heap.size <= 2 * b.sessions.size + 1025, 'stale heap entries are compacted')
    clock.t = 5000
    b.sweep()
    for (const [sid, expires] of expected) {
      assert.equal(b.sessions.has(sid), expires > 5000, `${sid} expiring at ${expires}`)
    }
  })

  it('the sweep timer does not keep the process alive, and close() stops it', () => {
    const b = new SessionBackend({ sweepIntervalMs: 10 })
    assert.equal(b.timer.hasRef(), false)
    b.close()
    assert.equal(b.timer, null)
  })
})
