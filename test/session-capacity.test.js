'use strict'

/**
 * Cluster store capacity: a session too big to store is refused with 413 and
 * the option to change (never a 200 for a session that was not kept), the
 * total bytes the primary holds are bounded by maxTotalBytes with the same
 * eviction as maxSessions, and the bytes held show in the primary's stats.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const { SessionBackend } = require('../lib/session/cluster-backend')
const { ClusterStore } = require('../lib/session/cluster-store')
const { resolveSessionOptions } = require('../lib/session/options')
const { startCluster } = require('./helpers/cluster')

const FIXTURE = path.join(__dirname, 'fixtures', 'session-big-cluster.js')

function cookieFrom (res) {
  const header = res.headers['set-cookie'] || []
  const cookie = header.find((c) => c.startsWith('connect.sid='))
  return cookie && cookie.split(';')[0]
}

describe('cluster backend: maxTotalBytes', () => {
  function backendAt (clock, options) {
    return new SessionBackend(Object.assign({ sweepIntervalMs: 0, now: () => clock.t }, options))
  }
  const json = (n) => JSON.stringify({ pad: 'x'.repeat(n - 10) }) // n bytes

  it('counts the bytes held through writes, rewrites, destroys, expiry and clear', () => {
    const clock = { t: 1000 }
    const b = backendAt(clock)
    b.set('a', json(100), 5000)
    b.set('b', json(200), 6000)
    assert.equal(b.stats().bytes, 300)
    b.set('a', json(150), 5000)
    assert.equal(b.stats().bytes, 350)
    b.destroy('b')
    assert.equal(b.stats().bytes, 150)
    b.set('c', '{"é":1}', 7000) // UTF-8 bytes, not characters
    assert.equal(b.stats().bytes, 150 + Buffer.byteLength('{"é":1}'))
    clock.t = 6000
    assert.equal(b.sweep(), 1)
    assert.equal(b.stats().bytes, Buffer.byteLength('{"é":1}'))
    b.clear()
    assert.deepEqual(b.stats(), { sessions: 0, bytes: 0, maxSessions: 100000, maxTotalBytes: 128 * 1024 * 1024, evicted: 0, leases: null })
  })

  it('over maxTotalBytes, evicts the sessions closest to expiry first, like maxSessions', () => {
    const clock = { t: 1000 }
    const b = backendAt(clock, { maxTotalBytes: 1000 })
    b.set('a', json(400), 5000)
    b.set('b', json(400), 3000)
    b.set('c', json(150), 9000)
    assert.equal(b.evicted, 0)
    b.set('d', json(300), 8000) // 1250 > 1000: b (expires first) goes
    assert.equal(b.get('b'), null)
    assert.deepEqual(['a', 'c', 'd'].map((sid) => b.get(sid) !== null), [true, true, true])
    assert.equal(b.stats().bytes, 850)
    assert.equal(b.evicted, 1)
    b.set('c', json(500), 9000) // growing c to 500: 1200 > 1000, a (expires first) goes, c stays
    assert.equal(b.get('a'), null)
    assert.equal(b.get('c'), json(500))
    assert.equal(b.stats().bytes, 800)
    assert.equal(b.evicted, 2)
    clock.t = 9500 // c expired; only d left
    assert.equal(b.length(), 0)
    assert.equal(b.stats().bytes, 0)
  })

  it('a session bigger than maxTotalBytes is refused, naming the option, and evicts nothing', () => {
    const b = backendAt({ t: 0 }, { maxTotalBytes: 1000 })
    b.set('a', json(500), 5000)
    assert.throws(() => b.set('huge', json(1001), 5000), /a session of 1001 bytes cannot be stored: .*total bound of 1000 bytes \(session option maxTotalBytes\)/)
    assert.notEqual(b.get('a'), null)
    assert.equal(b.get('huge'), null)
    assert.equal(b.stats().bytes, 500)
  })

  it("'configure' sets maxTotalBytes, validated", () => {
    const b = backendAt({ t: 0 })
    b.dispatch({ op: 'configure', maxTotalBytes: 4096 })
    assert.equal(b.maxTotalBytes, 4096)
    assert.throws(() => b.dispatch({ op: 'configure', maxTotalBytes: -1 }), /maxTotalBytes must be an integer >= 1/)
  })
})

describe('cluster store: maxSessionBytes', () => {
  function storeOver (backend, options) {
    return new ClusterStore(Object.assign({ transport: async (msg) => backend.dispatch(msg) }, options))
  }
  const sess = (n) => ({ cookie: { expires: new Date(Date.now() + 60000).toISOString() }, big: 'x'.repeat(n) })

  it('a session over maxSessionBytes is refused with a 413 error naming the option, before it is sent', async () => {
    const backend = new SessionBackend({ sweepIntervalMs: 0 })
    const sent = []
    const store = new ClusterStore({ maxSessionBytes: 1000, transport: async (msg) => { sent.push(msg.op); return backend.dispatch(msg) } })
    const err = await new Promise((resolve) => store.set('s1', sess(2000), resolve))
    assert.ok(err, 'the callback gets an error')
    assert.equal(err.code, 'ERR_CLUSTERIZE_SESSION_TOO_LARGE')
    assert.equal(err.status, 413)
    assert.equal(err.option, 'maxSessionBytes')
    assert.match(err.message, /^session too large: it is \d+ bytes as JSON, over the limit of 1000 bytes \(session option maxSessionBytes\)/)
    assert.deepEqual(sent, [], 'nothing crossed the bus')
    assert.deepEqual(store.availability(), { available: true, lastError: null }, 'a big session is not an outage')
    assert.equal(await new Promise((resolve) => store.set('s2', sess(10), resolve)), null)
  })

  it('the default limit is 512 KiB', async () => {
    const store = storeOver(new SessionBackend({ sweepIntervalMs: 0 }))
    assert.equal(await new Promise((resolve) => store.set('ok', sess(500 * 1024), resolve)), null)
    const err = await new Promise((resolve) => store.set('big', sess(513 * 1024), resolve))
    assert.match(err.message, /over the limit of 524288 bytes \(session option maxSessionBytes\)/)
  })

  it('options: maxSessionBytes and maxTotalBytes are validated', () => {
    const secret = 'options-secret-0123456789-abcdefghijklmn'
    assert.throws(() => resolveSessionOptions({ secret, maxSessionBytes: 0 }, {}), /option "maxSessionBytes" must be an integer >= 1, got 0/)
    assert.throws(() => resolveSessionOptions({ secret, maxTotalBytes: '1mb' }, {}), /option "maxTotalBytes" must be an integer >= 1, got "1mb"/)
    assert.throws(() => resolveSessionOptions({ secret, maxSessionBytes: 2000, maxTotalBytes: 1000 }, {}), /option "maxSessionBytes" \(2000\) is over maxTotalBytes \(1000\)/)
    const opts = resolveSessionOptions({ secret, maxSessionBytes: 1000, maxTotalBytes: 2000 }, {})
    assert.equal(opts.maxSessionBytes, 1000)
    assert.equal(opts.maxTotalBytes, 2000)
  })
})

describe('2-worker cluster, cluster store: a 1.2 MB session', () => {
  let cluster

  before(async () => {
    cluster = await startCluster(FIXTURE, {
      env: {
        CZ_SESSION_OPTIONS: JSON.stringify({ store: 'cluster', maxTotalBytes: 64 * 1024 * 1024 }),
        CZ_TEST_OPTIONS: JSON.stringify({ probes: { port: 0 } })
      }
    })
  })
  after(async () => {
    if (cluster) await cluster.stop()
  })

  it('is refused with 413 naming maxSessionBytes, no cookie and a log line; never a 200', async () => {
    const res = await cluster.get('/big?kb=1200', { method: 'POST' })
    assert.equal(res.status, 413, res.body)
    assert.match(res.json.error, /^session too large: it is \d+ bytes as JSON, over the limit of 524288 bytes \(session option maxSessionBytes\)/)
    assert.equal(cookieFrom(res), undefined)
    await cluster.waitFor(() => /session not stored for POST \/big: session too large/.test(cluster.output), 10000)
  })

  it('a session under the limit is stored, seen by both workers, and its bytes show in /stats', async () => {
    const res = await cluster.get('/big?kb=300', { method: 'POST' })
    assert.equal(res.status, 200, res.body)
    const cookie = cookieFrom(res)
    const pids = new Set()
    for (let i = 0; i < 24 && pids.size < 2; i++) {
      const read = await cluster.get('/size', { headers: { cookie } })
      assert.equal(read.json.size, 300 * 1024)
      pids.add(read.json.pid)
    }
    assert.equal(pids.size, 2)
    const stats = JSON.parse((await cluster.probe('/stats')).body)
    assert.equal(stats.sessions.sessions, 1)
    assert.ok(stats.sessions.bytes > 300 * 1024 && stats.sessions.bytes < 301 * 1024, `bytes ${stats.sessions.bytes}`)
    assert.equal(stats.sessions.maxTotalBytes, 64 * 1024 * 1024, 'the bound a worker sent')
  })
})

describe('2-worker cluster, cluster store: maxSessionBytes raised past bus.maxMessageBytes', () => {
  let cluster

  before(async () => {
    cluster = await startCluster(FIXTURE, { env: { CZ_SESSION_OPTIONS: JSON.stringify({ store: 'cluster', maxSessionBytes: 4 * 1024 * 1024 }) } })
  })
  after(async () => {
    if (cluster) await cluster.stop()
  })

  it('a 1.2 MB session is stored and read back on both workers: maxSessionBytes is the one limit (the session is not re-encoded by the bus)', async () => {
    const res = await cluster.get('/big?kb=1200', { method: 'POST' })
    assert.equal(res.status, 200, res.body)
    const cookie = cookieFrom(res)
    const pids = new Set()
    for (let i = 0; i < 24 && pids.size < 2; i++) {
      const read = await cluster.get('/size', { headers: { cookie } })
      assert.equal(read.json.size, 1200 * 1024)
      pids.add(read.json.pid)
    }
    assert.equal(pids.size, 2)
  })
})

describe('cluster store instances in one process: isolated by prefix', () => {
  const cookie = () => ({ cookie: { expires: new Date(Date.now() + 60000).toISOString() } })
  const call = (store, method, ...args) => new Promise((resolve, reject) => {
    store[method](...args, (err, value) => err ? reject(err) : resolve(value))
  })

  it('clear(), length() and all() act on their own prefix only; the same id in two prefixes is two sessions', async () => {
    // No transport: the real one, so every instance meets the one backend this process attaches.
    const a = new ClusterStore({ prefix: 'iso-a:' })
    const b = new ClusterStore({ prefix: 'iso-b:' })
    await call(a, 'set', 'same-id', Object.assign(cookie(), { who: 'a' }))
    await call(a, 'set', 'only-a', Object.assign(cookie(), { who: 'a2' }))
    await call(b, 'set', 'same-id', Object.assign(cookie(), { who: 'b' }))
    assert.equal((await call(a, 'get', 'same-id')).who, 'a')
    assert.equal((await call(b, 'get', 'same-id')).who, 'b')
    assert.equal(await call(b, 'get', 'only-a'), null)
    assert.equal(await call(a, 'length'), 2)
    assert.equal(await call(b, 'length'), 1)
    assert.deepEqual((await call(a, 'all')).map((s) => s.id).sort(), ['only-a', 'same-id'])
    assert.deepEqual((await call(b, 'all')).map((s) => `${s.id}=${s.who}`), ['same-id=b'])

    await call(a, 'clear')
    assert.equal(await call(a, 'length'), 0)
    assert.equal(await call(b, 'length'), 1, "a's clear() left b's sessions alone")
    assert.equal((await call(b, 'get', 'same-id')).who, 'b')
    await call(b, 'destroy', 'same-id')
    assert.equal(await call(b, 'length'), 0)
  })

  it('stores with the same prefix (every worker by default) share their sessions', async () => {
    const one = new ClusterStore({ prefix: 'iso-shared:' })
    const two = new ClusterStore({ prefix: 'iso-shared:' })
    await call(one, 'set', 'sid', Object.assign(cookie(), { n: 1 }))
    assert.equal((await call(two, 'get', 'sid')).n, 1)
    assert.equal(await call(two, 'length'), 1)
    await call(two, 'clear')
    assert.equal(await call(one, 'get', 'sid'), null)
  })
})
