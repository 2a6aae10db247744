'use strict'

/**
 * The cluster store's read leases (lib/session/leases.js in the primary,
 * lib/session/lease-cache.js in each worker): the primary's bookkeeping with
 * a recording push, the worker's copies with revocations arriving out of
 * order, and a real 2-worker cluster where a worker holding a lease must
 * never answer a read with data older than a write another worker finished.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const http = require('http')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { SessionLeases, answerWithLeases, FORGET_AFTER_MS } = require('../lib/session/leases')
const { LeaseCache, sharedLeaseCache } = require('../lib/session/lease-cache')
const { SessionBackend } = require('../lib/session/cluster-backend')
const { startCluster } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')

const A = 101
const B = 202

function recordingLeases (options) {
  const pushed = []
  let clock = 1000
  const leases = new SessionLeases(Object.assign({
    leaseMs: 1000,
    now: () => clock,
    push (pid, method, data) {
      pushed.push({ pid, method, data })
      return true
    }
  }, options))
  return { leases, pushed, advance (ms) { clock += ms } }
}

/** A backend with 1 s leases on the real clock, and the revocations pushed to holders ([key, grant] each). */
function backendWithLeases () {
  const backend = new SessionBackend({ sweepIntervalMs: 0 })
  const pushed = []
  const leases = new SessionLeases({ leaseMs: 1000, push (pid, method, data) { pushed.push(data); return true } })
  return { backend, leases, pushed }
}

describe('read leases in the primary (SessionLeases)', () => {
  it('grants a lease on a session\'s second access from the same worker, and none to another while it is held', () => {
    const { leases } = recordingLeases()
    try {
      assert.equal(leases.grant('s', A), 0, 'first access: no affinity yet')
      const grant = leases.grant('s', A)
      assert.ok(grant > 0)
      assert.equal(leases.grant('s', B), 0, 'A holds it')
      assert.ok(leases.grant('s', A) > grant, 'A renews its own lease')
    } finally {
      leases.close()
    }
  })

  it('a write of another worker waits for the holder to answer the revocation', async () => {
    const { leases, pushed } = recordingLeases()
    try {
      leases.grant('s', A)
      const grant = leases.grant('s', A)
      assert.equal(leases.beforeAccess('s', A), null, 'the holder writes at once')
      const wait = leases.beforeAccess('s', B)
      assert.ok(wait instanceof Promise)
      assert.deepEqual(pushed, [{ pid: A, method: 'revoke', data: ['s', grant] }])
      let settled = false
      wait.then(() => { settled = true })
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(settled, false, 'no answer yet')
      leases.acknowledged(B, [grant])
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(settled, false, 'only the holder answers for its lease')
      leases.acknowledged(A, [grant])
      await wait
      assert.equal(leases.beforeAccess('s', B), null, 'revoked: the write goes ahead')
      assert.equal(leases.grant('s', B), 0, 'a revoked session gets no lease for a while')
      assert.equal(leases.stats().revoked, 1)
    } finally {
      leases.close()
    }
  })

  it('a holder that does not answer holds another worker\'s access past its lease, until it answers', async () => {
    const leases = new SessionLeases({ leaseMs: 40, push: () => true })
    try {
      leases.grant('s', A)
      const grant = leases.grant('s', A)
      const wait = leases.beforeAccess('s', B)
      let settled = false
      wait.then(() => { settled = true })
      await new Promise((resolve) => setTimeout(resolve, 200))
      assert.equal(settled, false, 'the lease ran out, but a save the holder answered may still be in its pipe')
      assert.equal(leases.stats().revoking, 1)
      leases.prune()
      assert.equal(leases.beforeAccess('s', B), wait, 'still the same revocation')
      leases.acknowledged(A, [grant])
      await wait
      assert.equal(leases.stats().revoking, 0)
      assert.equal(leases.beforeAccess('s', B), null)
    } finally {
      leases.close()
    }
  })

  it('a holder that exits, or is already gone, releases the write', async () => {
    const { leases } = recordingLeases()
    try {
      leases.grant('s', A)
      leases.grant('s', A)
      const wait = leases.beforeAccess('s', B)
      leases.forget(A)
      await wait
      assert.equal(leases.beforeAccess('s', B), null)
    } finally {
      leases.close()
    }
    // Gone from the host (it exited), its last messages not read yet: wait for forget().
    const gone = new SessionLeases({ leaseMs: 60000, push: () => false })
    try {
      gone.grant('t', A)
      gone.grant('t', A)
      const waiting = gone.beforeAccess('t', B)
      let settled = false
      waiting.then(() => { settled = true })
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(settled, false, 'not before its last messages are read')
      gone.forget(A)
      await waiting
      assert.equal(gone.beforeAccess('t', B), null)
      gone.grant('u', A)
      assert.equal(gone.grant('u', A), 0, 'a forgotten worker gets no lease')
    } finally {
      gone.close()
    }
  })

  it('a request that waited for a revocation takes no lease (its worker may have exited meanwhile)', async () => {
    const { backend, leases, pushed } = backendWithLeases()
    try {
      const expires = Date.now() + 60000
      answerWithLeases(backend, leases, { op: 'set', sid: 'x', sess: '{"n":1}', expires, lease: 1 }, A)
      const held = answerWithLeases(backend, leases, { op: 'get', sid: 'x', lease: 1 }, A)
      assert.ok(Array.isArray(held))
      answerWithLeases(backend, leases, { op: 'get', sid: 'x', lease: 1 }, B)
      const read = answerWithLeases(backend, leases, { op: 'get', sid: 'x', lease: 1 }, B)
      assert.ok(read instanceof Promise)
      leases.forget(A)
      assert.equal(await read, '{"n":1}', 'the JSON alone, no grant')
      assert.deepEqual(pushed, [['x', held[2]]])
    } finally {
      leases.close()
      backend.close()
    }
  })

  it('a lease that ran out is revoked too before another worker\'s access, with no back-off', async () => {
    const { leases, pushed, advance } = recordingLeases()
    try {
      leases.grant('s', A)
      const grant = leases.grant('s', A)
      advance(1001)
      const wait = leases.beforeAccess('s', B)
      assert.ok(wait instanceof Promise, 'the holder may have answered saves still unread in its pipe')
      assert.deepEqual(pushed, [{ pid: A, method: 'revoke', data: ['s', grant] }])
      leases.acknowledged(A, [grant])
      await wait
      assert.equal(leases.beforeAccess('s', B), null)
      assert.equal(leases.grant('s', B), 0, 'B\'s first access')
      assert.ok(leases.grant('s', B) > 0, 'not contended: no back-off, B holds it from its second access')
    } finally {
      leases.close()
    }
  })

  it('a lease that ran out on a session nobody uses is revoked in the background, then its record goes', async () => {
    const { leases, pushed, advance } = recordingLeases()
    try {
      leases.grant('s', A)
      const grant = leases.grant('s', A)
      advance(FORGET_AFTER_MS + 1)
      leases.prune()
      assert.deepEqual(pushed, [{ pid: A, method: 'revoke', data: ['s', grant] }])
      assert.equal(leases.stats().released, 1)
      assert.equal(leases.records.size, 1, 'kept until the holder answers')
      leases.acknowledged(A, [grant])
      await new Promise((resolve) => setImmediate(resolve))
      leases.prune()
      assert.equal(leases.records.size, 0)
    } finally {
      leases.close()
    }
  })

  it('clear() revokes every other worker\'s leases first; eviction revokes without holding up the write that evicted', async () => {
    const { leases, pushed } = recordingLeases()
    try {
      for (const key of ['a', 'b']) { leases.grant(key, A); leases.grant(key, A) }
      leases.grant('c', B)
      const c = leases.grant('c', B)
      const wait = leases.beforeClear(B)
      assert.deepEqual(pushed.map((p) => [p.pid, p.data[0]]).sort(), [[A, 'a'], [A, 'b']])
      assert.equal(leases.grant('c', B), 0, 'no grant while a clear waits')
      leases.acknowledged(A, pushed.map((p) => p.data[1]))
      await wait
      assert.equal(leases.beforeClear(B), null)
      leases.cleared()
      pushed.length = 0
      leases.grant('d', A)
      const d = leases.grant('d', A)
      leases.evicted('d')
      assert.deepEqual(pushed, [{ pid: A, method: 'revoke', data: ['d', d] }])
      const next = leases.beforeAccess('d', B)
      assert.ok(next instanceof Promise, 'the next access of an evicted session waits for its holder: it may resave it')
      leases.acknowledged(A, [d])
      await next
      assert.ok(c > 0)
    } finally {
      leases.close()
    }
  })

  it('answerWithLeases: grants travel with reads and saves, a write from elsewhere revokes, a touch ends the lease', async () => {
    const { backend, leases, pushed } = backendWithLeases()
    try {
      const expires = Date.now() + 60000
      assert.equal(answerWithLeases(backend, leases, { op: 'set', sid: 'x', sess: '{"n":1}', expires, lease: 1 }, A), true, 'first access: no lease')
      const got = answerWithLeases(backend, leases, { op: 'get', sid: 'x', lease: 1 }, A)
      assert.ok(Array.isArray(got), 'second access from A: a lease')
      assert.deepEqual([got[0], got[1], got[3]], ['{"n":1}', expires, 1000])
      assert.equal(answerWithLeases(backend, leases, { op: 'get', sid: 'x' }, A), '{"n":1}', 'the holder reads at once, with or without a lease')
      // A may have answered saves the primary has not read yet: B's read waits for A's answer to the revocation.
      const read = answerWithLeases(backend, leases, { op: 'get', sid: 'x' }, B)
      assert.ok(read instanceof Promise, 'B\'s read waits for A')
      assert.deepEqual(pushed, [['x', got[2]]])
      // A's save, read before its answer to the revocation (it was sent first), is applied at once.
      assert.equal(answerWithLeases(backend, leases, { op: 'set', sid: 'x', sess: '{"n":2}', expires, lease: 1 }, A), true, 'no new lease while it is revoked')
      const saved = answerWithLeases(backend, leases, { op: 'set', sid: 'x', sess: '{"n":3}', expires, lease: 1 }, B)
      assert.ok(saved instanceof Promise, 'B\'s save waits for A too')
      leases.acknowledged(A, [got[2]])
      assert.equal(await read, '{"n":2}', 'B reads what A saved before it answered')
      assert.equal(await saved, true)
      assert.equal(backend.get('x'), '{"n":3}')
      assert.deepEqual(pushed, [['x', got[2]]], 'one revocation for both')
      // all() revokes every other worker's lease first.
      answerWithLeases(backend, leases, { op: 'set', sid: 'z', sess: '{"z":1}', expires, lease: 1 }, A)
      await new Promise((resolve) => setTimeout(resolve, 1100)) // past the 1 s quiet time of x's revocation
      const z = answerWithLeases(backend, leases, { op: 'set', sid: 'z', sess: '{"z":2}', expires, lease: 1 }, A)
      assert.ok(Array.isArray(z), 'A holds z')
      assert.ok(Array.isArray(answerWithLeases(backend, leases, { op: 'all' }, A)), 'the holder lists at once')
      const all = answerWithLeases(backend, leases, { op: 'all' }, B)
      assert.ok(all instanceof Promise, 'all() of another worker waits for the holder')
      assert.deepEqual(pushed[pushed.length - 1], ['z', z[0]])
      leases.acknowledged(A, [z[0]])
      assert.ok((await all).some(([sid, json]) => sid === 'z' && json === '{"z":2}'))
      answerWithLeases(backend, leases, { op: 'set', sid: 'y', sess: '{"cookie":{}}', expires, lease: 1 }, A)
      const y = answerWithLeases(backend, leases, { op: 'set', sid: 'y', sess: '{"cookie":{}}', expires, lease: 1 }, A)
      assert.ok(Array.isArray(y))
      answerWithLeases(backend, leases, { op: 'touch', sid: 'y', expires: expires + 1000, cookie: '{"a":1}' }, A)
      assert.equal(leases.beforeAccess('y', B), null, 'the touch ended A\'s lease: nothing to revoke')
      assert.equal(answerWithLeases(backend, leases, { op: 'set', sid: 'gone', sess: '{}', expires: Date.now() - 1, lease: 1 }, A), true, 'a save that deletes grants nothing')
    } finally {
      leases.close()
      backend.close()
    }
  })
})

describe('saves under a lease in a worker (LeaseCache)', () => {
  it('a save under a live lease updates the copy at once; no reply replaces it until the save is answered', async () => {
    const cache = new LeaseCache()
    const expires = Date.now() + 60000
    assert.equal(cache.savingUnderLease('k', '{"n":1}', expires), 0, 'no lease: the save waits for the primary')
    cache.keep('k', '{"n":1}', expires, 3, 60000, performance.now())
    const until = cache.savingUnderLease('k', '{"n":2}', expires)
    assert.ok(until > performance.now(), 'the lease\'s end by this clock')
    assert.equal(cache.read('k'), '{"n":2}', 'this worker reads its own save')
    cache.keep('k', '{"n":1}', expires, 4, 60000, performance.now())
    assert.equal(cache.read('k'), '{"n":2}', 'a newer grant on an older read does not replace it while the save is out')
    let settled = null
    cache.settledBehind(5000).then((value) => { settled = value })
    assert.equal(await cache.settledBehind(10), false, 'not settled while the save is out')
    cache.savedUnderLease('k', true)
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(settled, true, 'settled once the primary answered')
    assert.equal(await cache.settledBehind(10), true)
    cache.keep('k', '{"n":2}', expires, 5, 60000, performance.now())
    assert.equal(cache.read('k'), '{"n":2}')
    cache.savingUnderLease('k', '{"n":3}', expires)
    cache.savedUnderLease('k', false)
    assert.equal(cache.read('k'), undefined, 'a save the primary failed drops the copy: the next read asks the primary')
    cache.prune()
  })
})

describe('a bound lowered at runtime (a store\'s deprecated maxTotalBytes)', () => {
  it('ends every lease first, so no save a holder answered is refused by the new bound', async () => {
    const { backend, leases, pushed } = backendWithLeases()
    try {
      const expires = Date.now() + 60000
      const big = JSON.stringify({ big: 'x'.repeat(2000) })
      answerWithLeases(backend, leases, { op: 'set', sid: 'x', sess: '{}', expires, lease: 1 }, A)
      const held = answerWithLeases(backend, leases, { op: 'set', sid: 'x', sess: '{}', expires, lease: 1 }, A)
      assert.ok(Array.isArray(held), 'A holds x')
      assert.equal(answerWithLeases(backend, leases, { op: 'configure', maxTotalBytes: backend.maxTotalBytes * 2 }, B), true, 'a higher bound changes nothing for the holders')
      const configured = answerWithLeases(backend, leases, { op: 'configure', maxTotalBytes: 1000 }, B)
      assert.ok(configured instanceof Promise, 'a lower bound waits for the holders')
      assert.deepEqual(pushed, [['x', held[0]]])
      // A answered this save under its lease before it read the revocation: it is applied with the old bound.
      assert.equal(answerWithLeases(backend, leases, { op: 'set', sid: 'x', sess: big, expires, lease: 1 }, A), true)
      leases.acknowledged(A, [held[0]])
      assert.equal(await configured, true)
      assert.equal(backend.maxTotalBytes, 1000)
      assert.equal(backend.get('x'), big, 'the answered save was kept')
      answerWithLeases(backend, leases, { op: 'get', sid: 'x', lease: 1 }, A)
      assert.ok(!Array.isArray(answerWithLeases(backend, leases, { op: 'get', sid: 'x', lease: 1 }, A)), 'no lease after it')
    } finally {
      leases.close()
      backend.close()
    }
  })
})

describe('read leases in the session service', () => {
  const { sessionService } = require('../lib/session/cluster-service')
  const { resolveConfig } = require('../lib/config')

  it('are on with workers to push to, off with clusterStore.leaseMs 0 or in-process (workers: 0)', () => {
    const push = () => true
    const on = sessionService.start({ config: resolveConfig({}), push })
    const off = sessionService.start({ config: resolveConfig({ clusterStore: { leaseMs: 0 } }), push })
    const inProcess = sessionService.start({ config: resolveConfig({}) })
    try {
      assert.deepEqual(on.api.stats().leases, { leaseMs: 1000, granted: 0, revoked: 0, released: 0, revoking: 0 })
      assert.equal(off.api.stats().leases, null)
      assert.equal(inProcess.api.stats().leases, null)
      const msg = { op: 'set', sid: 'z', sess: '{}', expires: Date.now() + 60000, lease: 1 }
      on.requests.set(msg, { pid: A })
      assert.ok(Array.isArray(on.requests.set(msg, { pid: A })), 'a lease on the second save from the same worker')
      off.requests.set(msg, { pid: A })
      assert.equal(off.requests.set(msg, { pid: A }), true, 'leases off: no grant')
    } finally {
      on.close()
      off.close()
      inProcess.close()
    }
  })
})

describe('read leases in a worker (LeaseCache)', () => {
  it('answers from a live lease, not past its end or the session\'s expiry', () => {
    const cache = new LeaseCache()
    const now = performance.now()
    cache.keep('k', '{"n":1}', Date.now() + 60000, 1, 60000, now)
    assert.equal(cache.read('k'), '{"n":1}')
    cache.keep('old', '{}', Date.now() + 60000, 2, 10, now - 20)
    assert.equal(cache.read('old'), undefined, 'the lease ran out (counted from before the request)')
    cache.keep('dead', '{}', Date.now() - 1, 3, 60000, now)
    assert.equal(cache.read('dead'), undefined, 'the session expired')
    cache.writing('k')
    assert.equal(cache.read('k'), undefined, 'a save on its way drops the copy')
    cache.prune()
  })

  it('the process\'s cache answers revocations through its client even when first made without one, once per client', async () => {
    // The test fixture reads the cache's hits with no client; a store's later call brings the client.
    const first = sharedLeaseCache()
    const handlers = []
    const acks = []
    const client = { onPush: (handler) => handlers.push(handler), notify: (method, data) => acks.push([method, data]) }
    assert.equal(sharedLeaseCache(client), first, 'one cache per process')
    assert.equal(sharedLeaseCache(client), first)
    assert.equal(handlers.length, 1, 'registered once for this client')
    first.keep('k', '{}', Date.now() + 60000, 7, 60000, performance.now())
    handlers[0]('revoke', ['k', 7])
    handlers[0]('revoke', ['j', 9])
    assert.equal(first.read('k'), undefined, 'the revoked copy is gone')
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(acks, [['revoked', [7, 9]]], 'the revocations of one message answered together')
    handlers[0]('revoke', 'malformed')
    handlers[0]('other', ['k', 8])
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(acks, [['revoked', [7, 9]]], 'nothing acknowledged for a malformed or foreign push')
  })

  it('an acknowledgement the channel refuses (backpressure) is sent again until it goes: the primary waits for it', async () => {
    const handlers = []
    const acks = []
    let refuse = 2
    const client = {
      onPush: (handler) => handlers.push(handler),
      notify (method, data) {
        if (refuse-- > 0) throw Object.assign(new Error('full'), { code: 'ERR_CLUSTERIZE_BUS_BACKPRESSURE' })
        acks.push([method, data])
        return true
      }
    }
    sharedLeaseCache(client)
    handlers[0]('revoke', ['x', 11])
    await eventually(() => acks.length === 1, { timeoutMs: 20000, what: 'the acknowledgement sent again' })
    handlers[0]('revoke', ['y', 12])
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(acks, [['revoked', [11]], ['revoked', [12]]])
  })

  it('a reply read while this worker\'s own write or clear of the key is out keeps nothing', () => {
    const cache = new LeaseCache()
    const later = () => Date.now() + 60000
    cache.writing('k')
    cache.writing('k')
    cache.keep('k', '{"before":"the save"}', later(), 1, 60000, performance.now())
    assert.equal(cache.read('k'), undefined, 'the reply to a read sent before the save')
    cache.written('k')
    cache.keep('k', '{"first":"save"}', later(), 2, 60000, performance.now())
    assert.equal(cache.read('k'), undefined, 'the second save is still out')
    cache.written('k')
    cache.keep('k', '{"second":"save"}', later(), 3, 60000, performance.now())
    assert.equal(cache.read('k'), '{"second":"save"}')
    cache.clearing()
    assert.equal(cache.read('k'), undefined)
    cache.keep('j', '{}', later(), 4, 60000, performance.now())
    assert.equal(cache.read('j'), undefined, 'no copy while a clear is out')
    cache.cleared()
    cache.keep('j', '{}', later(), 5, 60000, performance.now())
    assert.equal(cache.read('j'), '{}')
    cache.prune()
  })

  it('a revocation handled before the reply that granted the lease wins; an older grant never replaces a newer one', async () => {
    const cache = new LeaseCache()
    assert.equal(cache.revoke(['k', 5]), 5)
    cache.keep('k', '{"stale":true}', Date.now() + 60000, 5, 60000, performance.now())
    assert.equal(cache.read('k'), undefined, 'revoked before it was kept')
    cache.keep('k', '{"n":7}', Date.now() + 60000, 7, 60000, performance.now())
    cache.keep('k', '{"n":6}', Date.now() + 60000, 6, 60000, performance.now())
    assert.equal(cache.read('k'), '{"n":7}')
    cache.revoke(['k', 7])
    assert.equal(cache.read('k'), undefined)
    assert.equal(cache.revoke('junk'), null)
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(cache.revokedGrants.size, 0, 'revoked grants are forgotten once the replies before them have run')
    cache.prune()
  })
})

const FIXTURE = path.join(__dirname, 'fixtures', 'session-lease-cluster.js')

/** A kept-alive connection of its own (one socket), and the worker it landed on. */
function connection () {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  return { agent, pid: 0 }
}

function cookieFrom (res) {
  const cookie = (res.headers['set-cookie'] || []).find((c) => c.startsWith('connect.sid='))
  return cookie && cookie.split(';')[0]
}

/** Two kept-alive connections on different workers (round robin hands out new connections in turn). */
async function twoConnections (cluster) {
  const byPid = new Map()
  for (let i = 0; i < 40 && byPid.size < 2; i++) {
    const conn = connection()
    const res = await cluster.get('/plain', { agent: conn.agent })
    conn.pid = res.json.pid
    if (!byPid.has(conn.pid)) byPid.set(conn.pid, conn)
    else conn.agent.destroy()
    // A worker restarting after a kill: ask again once it is back.
    if (byPid.size < 2 && i >= 3) await sleep(250)
  }
  assert.equal(byPid.size, 2, 'two connections on two workers')
  return [...byPid.values()]
}

function sleep (ms) {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** The response, or an Error saying it did not come while the primary was stopped (a save waiting for its reply). */
function answeredWithin (pending, ms) {
  let timer
  const late = new Promise((resolve) => { timer = setTimeout(resolve, ms, new Error(`no answer within ${ms} ms with the primary stopped: the save waited for the primary`)) })
  return Promise.race([pending, late]).finally(() => clearTimeout(timer))
}

/** A logged-in session whose lease worker `a` holds (its second access on a grants it). */
async function leasedSession (cluster, a) {
  const login = await cluster.get('/login?user=saver', { method: 'POST', agent: a.agent })
  assert.equal(login.status, 200)
  const headers = { cookie: cookieFrom(login) }
  let visits = 0
  for (let i = 0; i < 3; i++) {
    const res = await cluster.get('/count', { agent: a.agent, headers })
    assert.equal(res.json.pid, a.pid)
    assert.equal(res.json.visits, ++visits)
  }
  return { headers, visits }
}

describe('read leases in a 2-worker cluster', () => {
  let cluster
  const conns = []
  before(async () => {
    // Leases of 1.5 s: a write on the other worker comes well within one, even on a slow box.
    cluster = await startCluster(FIXTURE, { env: { CZ_TEST_OPTIONS: JSON.stringify({ clusterStore: { leaseMs: 1500 } }) } })
    conns.push(...await twoConnections(cluster))
  })
  after(async () => {
    for (const conn of conns) conn.agent.destroy()
    if (cluster) await cluster.stop()
  })

  it('a worker answers reads of a session from its lease, and sees every write another worker finished', async () => {
    const [a, b] = conns
    const login = await cluster.get('/login?user=lee', { method: 'POST', agent: a.agent })
    assert.equal(login.status, 200)
    const cookie = cookieFrom(login)
    const headers = { cookie }
    const hitsBefore = (await cluster.get('/lease-hits', { agent: a.agent })).json.hits
    let expected = 0
    for (let i = 0; i < 4; i++) {
      const res = await cluster.get('/count', { agent: a.agent, headers })
      assert.equal(res.json.pid, a.pid)
      assert.equal(res.json.visits, ++expected)
    }
    const hits = (await cluster.get('/lease-hits', { agent: a.agent })).json.hits
    assert.ok(hits > hitsBefore, `worker ${a.pid} answered reads from its lease (${hitsBefore} -> ${hits} hits)`)
    // Alternate: every read on either worker sees the write just finished on the other.
    for (let i = 0; i < 12; i++) {
      const conn = i % 3 === 2 ? b : a
      const res = await cluster.get('/count', { agent: conn.agent, headers })
      assert.equal(res.status, 200)
      assert.equal(res.json.pid, conn.pid)
      assert.equal(res.json.visits, ++expected, `request ${i} on worker ${conn.pid}`)
    }
    const stats = await cluster.stats()
    assert.ok(stats.sessions.leases.granted > 0, 'leases were granted')
    assert.ok(stats.sessions.leases.revoked > 0, 'writes on the other worker revoked them')
  })

  it('a holder whose event loop is stuck holds another worker\'s access past its lease (503 after timeoutMs), then everyone reads the new data', async () => {
    const [a, b] = conns
    const login = await cluster.get('/login?user=hang', { method: 'POST', agent: a.agent })
    const headers = { cookie: cookieFrom(login) }
    let expected = 0
    for (let i = 0; i < 3; i++) assert.equal((await cluster.get('/count', { agent: a.agent, headers })).json.visits, ++expected)
    // Stuck for 6 s: past its lease (1.5 s) and the other worker's store timeout (2 s).
    const blocked = cluster.get('/block?ms=6000', { agent: a.agent })
    await sleep(100)
    const written = cluster.get('/count', { agent: b.agent, headers })
    await cluster.waitFor(async () => (await cluster.stats()).sessions.leases.revoking > 0)
    const res = await written
    assert.deepEqual([res.status, res.json && res.json.pid], [503, undefined], 'not answered while the holder may still have an answered save unread: the store timed out')
    assert.ok((await cluster.stats()).sessions.leases.revoking >= 1, 'the revocation still waits for the stuck holder')
    await blocked
    const read = await cluster.get('/count', { agent: b.agent, headers })
    assert.deepEqual([read.json.pid, read.json.visits], [b.pid, ++expected], 'once the holder answered, the other worker reads and writes')
    const again = await cluster.get('/count', { agent: a.agent, headers })
    assert.deepEqual([again.json.pid, again.json.visits], [a.pid, ++expected], 'the holder did not answer from its old copy')
  })

  it('logout on one worker is seen at once by a worker holding a lease', async () => {
    const [a, b] = conns
    const login = await cluster.get('/login?user=out', { method: 'POST', agent: a.agent })
    const headers = { cookie: cookieFrom(login) }
    for (let i = 0; i < 3; i++) assert.equal((await cluster.get('/me', { agent: a.agent, headers })).status, 200)
    assert.equal((await cluster.get('/logout', { method: 'POST', agent: b.agent, headers })).json.pid, b.pid)
    const after = await cluster.get('/me', { agent: a.agent, headers })
    assert.equal(after.json.pid, a.pid)
    assert.equal(after.status, 401, 'the holder dropped its copy before the logout answered')
  })

  it('clusterStore.leaseMs is checked at startup', () => {
    const { resolveConfig } = require('../lib/config')
    assert.throws(() => resolveConfig({ clusterStore: { leaseMs: -1 } }), /clusterStore\.leaseMs/)
    assert.equal(resolveConfig({ clusterStore: { leaseMs: 0 } }).clusterStore.leaseMs, 0)
  })
})

describe('saves under a read lease: answered once written, never lost once answered', () => {
  let cluster
  let conns = []
  before(async () => {
    // Rare heartbeats: while the primary is stalled, only what a test sends fills the workers' pipes.
    const options = { clusterStore: { leaseMs: 1500 }, health: { heartbeatMs: 60000, heartbeatTimeoutMs: 120000 } }
    cluster = await startCluster(FIXTURE, { env: { CZ_TEST_OPTIONS: JSON.stringify(options) } })
  })
  after(async () => {
    for (const conn of conns) conn.agent.destroy()
    if (cluster) {
      cluster.signal('SIGCONT')
      await cluster.stop()
    }
  })
  async function freshConnections () {
    for (const conn of conns) conn.agent.destroy()
    conns = await twoConnections(cluster)
    return conns
  }

  /**
   * Save on worker a with the primary stopped (so an answer means the save was written, not
   * read), kill a first when asked, then read on worker b: taken once the primary runs again.
   */
  async function saveWithPrimaryStopped (killHolder) {
    const [a, b] = await freshConnections()
    const session = await leasedSession(cluster, a)
    let read
    cluster.signal('SIGSTOP')
    try {
      const saved = await answeredWithin(cluster.get('/count', { agent: a.agent, headers: session.headers }), 5000)
      assert.ifError(saved instanceof Error ? saved : null)
      assert.deepEqual([saved.status, saved.json.pid, saved.json.visits], [200, a.pid, ++session.visits], 'answered with the primary stopped: the save was written, not yet read')
      if (killHolder) process.kill(a.pid, 'SIGKILL')
      read = cluster.get('/count', { agent: b.agent, headers: session.headers })
      await sleep(100)
    } finally {
      // The primary wakes to the save, the read (and the holder's exit) at once.
      cluster.signal('SIGCONT')
    }
    const res = await read
    return { got: [res.json.pid, res.json.visits], expected: [b.pid, ++session.visits] }
  }

  /** One more kept-alive connection, on worker `pid`. */
  async function connectionOn (pid) {
    for (let i = 0; i < 40; i++) {
      const conn = connection()
      const res = await cluster.get('/plain', { agent: conn.agent })
      if (res.json.pid === pid) {
        conns.push(conn)
        return conn
      }
      conn.agent.destroy()
    }
    assert.fail(`no connection landed on worker ${pid}`)
  }

  /**
   * Issue 51's reproduction: worker a holds the lease on a session; the primary stalls; worker b
   * gets a request first, so its pipe holds unread data; a answers a save from its lease; after
   * the lease time (1.5 s) the same client's next request goes to b; the primary runs again.
   * b must read the save a answered.
   * @param {{ begin: Function, end: Function }} stall
   */
  async function saveThenReadElsewhereAfterLease (stall) {
    const [a, b] = await freshConnections()
    const other = await connectionOn(b.pid)
    const session = await leasedSession(cluster, a)
    let first
    let read
    await stall.begin(b)
    try {
      // A new session saved on b: b's pipe to the primary holds unread data before a's save.
      first = cluster.get('/count', { agent: other.agent }).catch((err) => err)
      await sleep(300)
      const saved = await answeredWithin(cluster.get('/count', { agent: a.agent, headers: session.headers }), 5000)
      assert.ifError(saved instanceof Error ? saved : null)
      assert.deepEqual([saved.status, saved.json.pid, saved.json.visits], [200, a.pid, ++session.visits], 'answered from the lease with the primary stalled')
      // Past the lease by the primary's clock, and by a's own.
      await sleep(1800)
      read = cluster.get('/count', { agent: b.agent, headers: session.headers })
      await sleep(300)
    } finally {
      await stall.end()
    }
    const res = await read
    await first
    assert.deepEqual([res.status, res.json.pid, res.json.visits], [200, b.pid, ++session.visits], 'b read the save a answered while the primary was stalled')
    const after = await cluster.get('/count', { agent: a.agent, headers: session.headers })
    assert.deepEqual([after.json.pid, after.json.visits], [a.pid, ++session.visits], 'and a reads b\'s save')
  }

  it('a save answered from a lease while the primary is stopped (SIGSTOP) past the lease is read by the next worker (issue 51)', async () => {
    await saveThenReadElsewhereAfterLease({
      begin () { cluster.signal('SIGSTOP') },
      end () { cluster.signal('SIGCONT') }
    })
  })

  it('a save answered from a lease while an app\'s bus handler blocks the primary past the lease is read by the next worker (issue 51)', async () => {
    const flag = path.join(os.tmpdir(), `cz-block-primary-${process.pid}-${Date.now()}`)
    let blocking
    try {
      await saveThenReadElsewhereAfterLease({
        async begin (b) {
          const blocker = await connectionOn(b.pid)
          blocking = cluster.get(`/block-primary?flag=${encodeURIComponent(flag)}`, { agent: blocker.agent }).catch((err) => err)
          // The handler marks when it starts blocking.
          await eventually(() => fs.existsSync(flag + '.blocking'), { timeoutMs: 20000, what: 'the primary\'s handler to block' })
        },
        async end () {
          fs.writeFileSync(flag, '')
          await blocking
        }
      })
    } finally {
      fs.writeFileSync(flag, '')
      for (const file of [flag, flag + '.blocking']) fs.rmSync(file, { force: true })
    }
  })

  it('the holder answers a save while the primary is stopped; another worker\'s read waits until it is applied', async () => {
    const { got, expected } = await saveWithPrimaryStopped(false)
    assert.deepEqual(got, expected, 'the other worker read the answered save')
  })

  it('a holder killed right after answering a save: the primary applies it before another worker reads', async () => {
    const { got, expected } = await saveWithPrimaryStopped(true)
    assert.deepEqual(got, expected, 'the dead worker\'s answered save was applied first')
  })

  it('a save the pipe cannot take in full is not answered, and a holder killed then loses only that unanswered save', async () => {
    const [a, b] = await freshConnections()
    const session = await leasedSession(cluster, a)
    // More than the socket's send buffer (net.core.wmem_default) can hold, under maxSessionBytes (512 KiB).
    const kb = 450
    let saving
    let answered = false
    cluster.signal('SIGSTOP')
    try {
      saving = cluster.get(`/big?kb=${kb}`, { agent: a.agent, headers: session.headers }).then((res) => { answered = true; return res }, (err) => err)
      await sleep(800)
      assert.equal(answered, false, 'not answered while the OS holds only part of it')
      process.kill(a.pid, 'SIGKILL')
    } finally {
      cluster.signal('SIGCONT')
    }
    const outcome = await saving
    assert.ok(outcome instanceof Error, `the request failed with its worker, it was never answered (got ${outcome && outcome.status})`)
    const res = await cluster.get('/count', { agent: b.agent, headers: session.headers })
    assert.deepEqual([res.status, res.json.visits], [200, ++session.visits], 'the session kept its last answered save')
  })

  it('a holder that hangs right after answering a save: another worker waits for it (or times out), then reads the save', async () => {
    const [a, b] = await freshConnections()
    const session = await leasedSession(cluster, a)
    const saved = await cluster.get('/count-then-block?ms=3000', { agent: a.agent, headers: session.headers })
    assert.equal(saved.json.visits, ++session.visits)
    const during = await cluster.get('/count', { agent: b.agent, headers: session.headers })
    if (during.status === 200) assert.deepEqual([during.json.pid, during.json.visits], [b.pid, ++session.visits], 'the hung holder\'s answered save was applied')
    else assert.equal(during.status, 503, 'or the store gave up waiting for the hung holder')
    await sleep(3000)
    const res = await cluster.get('/count', { agent: b.agent, headers: session.headers })
    assert.deepEqual([res.status, res.json.pid, res.json.visits], [200, b.pid, ++session.visits], 'the hung holder\'s answered save was applied')
  })
})
