'use strict'

/**
 * Real 2-worker clusters, with the cluster store and with the Redis store:
 * a login on one worker is seen by the other (fresh connections, checked by
 * pid); a SIGKILLed worker and a rolling reload lose no session.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const { startCluster } = require('./helpers/cluster')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')

const FIXTURE = path.join(__dirname, 'fixtures', 'session-cluster.js')

function cookieFrom (res) {
  const header = res.headers['set-cookie'] || []
  const cookie = header.find((c) => c.startsWith('connect.sid='))
  return cookie && cookie.split(';')[0]
}

/** Requests on fresh connections until both workers answered (or max tries). */
async function seenByEveryWorker (cluster, cookie, expectUser, tries) {
  const pids = new Set()
  for (let i = 0; i < (tries || 24) && pids.size < 2; i++) {
    const res = await cluster.get('/me', { headers: { cookie } })
    assert.equal(res.status, 200, `request ${i}: ${res.body}`)
    assert.equal(res.json.user, expectUser)
    pids.add(res.json.pid)
  }
  return pids
}

function readyCount (cluster) {
  return cluster.events.filter((e) => e.event === 'worker:ready').length
}

function sessionClusterSuite (name, sessionOptions, suiteOptions) {
  describe(`2-worker cluster, ${name}`, suiteOptions || {}, () => {
    let cluster
    let cookie

    before(async () => {
      // A 1 s reload bake (default 5 s) for the rolling reload below: sessions, not the wait, are tested.
      cluster = await startCluster(FIXTURE, { env: { CZ_SESSION_OPTIONS: JSON.stringify(sessionOptions()), CZ_TEST_OPTIONS: JSON.stringify({ reload: { bakeMs: 1000 } }) } })
    })
    after(async () => {
      if (cluster) await cluster.stop()
    })

    it('a login on one worker is seen by the other', async () => {
      const login = await cluster.get('/login?user=erin', { method: 'POST' })
      assert.equal(login.status, 200, login.body)
      cookie = cookieFrom(login)
      assert.ok(cookie, 'login sets the session cookie')
      const pids = await seenByEveryWorker(cluster, cookie, 'erin')
      assert.equal(pids.size, 2, 'both workers answered and saw the session')
    })

    it('writes on one worker are read on the other', async () => {
      const visits = []
      for (let i = 0; i < 6; i++) {
        const res = await cluster.get('/me', { headers: { cookie } })
        assert.equal(res.status, 200)
        visits.push(res.json.visits)
      }
      for (let i = 1; i < visits.length; i++) assert.equal(visits[i], visits[i - 1] + 1)
    })

    it('a SIGKILLed worker loses no session', async () => {
      const victim = (await cluster.get('/me', { headers: { cookie } })).json.pid
      const before = readyCount(cluster)
      process.kill(victim, 'SIGKILL')
      await cluster.waitFor(() => readyCount(cluster) > before, 20000)
      const pids = await seenByEveryWorker(cluster, cookie, 'erin')
      assert.equal(pids.size, 2)
      assert.ok(!pids.has(victim), 'the killed worker is gone')
    })

    it('a rolling reload loses no session', async () => {
      const oldPids = await seenByEveryWorker(cluster, cookie, 'erin')
      await cluster.reload()
      const newPids = await seenByEveryWorker(cluster, cookie, 'erin')
      assert.equal(newPids.size, 2)
      for (const pid of newPids) assert.ok(!oldPids.has(pid), 'answered by new workers')
    })

    it('logout ends the session on every worker', async () => {
      const out = await cluster.get('/logout', { method: 'POST', headers: { cookie } })
      assert.equal(out.status, 200)
      const pids = new Set()
      for (let i = 0; i < 24 && pids.size < 2; i++) {
        const res = await cluster.get('/me', { headers: { cookie } })
        assert.equal(res.status, 401)
        pids.add(res.json.pid)
      }
      assert.equal(pids.size, 2)
    })
  })
}

sessionClusterSuite('cluster store', () => ({ store: 'cluster' }))

describe('redis', async () => {
  const options = await redisTestOptions()
  const prefix = uniquePrefix('cluster')
  sessionClusterSuite('Redis store', () => ({ store: 'redis', redis: REDIS_URL, prefix }), options)
  after(async () => {
    if (!options.skip) await deletePrefix(prefix)
  })
})
