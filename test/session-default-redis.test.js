'use strict'

/**
 * `defaultSessionStore: 'redis'` (CLI: --sessions redis): an unchanged
 * express-session app (no store given) keeps its sessions in Redis, so a
 * login carries across workers and across a restart of the whole cluster
 * (the cluster store, held by the primary, would not survive that). Real
 * clusters and the shared Redis (REDIS_URL); under CI=true an unreachable
 * Redis fails the test.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const Redis = require('ioredis')
const { startCluster, stopAll, request } = require('./helpers/cluster')
const { REDIS_URL, redisTestOptions } = require('./helpers/redis')
const { resolveConfig } = require('../lib/config')
const { parseArgs, buildOptions } = require('../lib/cli/args')

const fixture = path.join(__dirname, 'fixtures/plain-session-cluster.js')
const env = (options) => ({ CZ_TEST_OPTIONS: JSON.stringify(options), REDIS_URL })

after(stopAll)

async function count (port, cookie) {
  const res = await request(port, '/count', { headers: cookie ? { Cookie: cookie } : {} })
  assert.strictEqual(res.status, 200, res.body)
  return { json: res.json, cookie: res.headers['set-cookie'] ? res.headers['set-cookie'][0].split(';')[0] : cookie }
}

test('the option needs a Redis, and the CLI flag sets it', () => {
  assert.throws(() => resolveConfig({ defaultSessionStore: 'redis' }, {}), /"defaultSessionStore" 'redis' needs a Redis: set bus\.redis \(CLI: --redis URL\) or REDIS_URL/)
  assert.strictEqual(resolveConfig({ defaultSessionStore: 'redis' }, { REDIS_URL }).sessionRedis, REDIS_URL)
  assert.strictEqual(resolveConfig({ defaultSessionStore: 'redis', bus: { redis: 'redis://127.0.0.1:6390' } }, { REDIS_URL }).sessionRedis, 'redis://127.0.0.1:6390')
  assert.throws(() => resolveConfig({ defaultSessionStore: 'redis' }, { REDIS_URL: 'http://nope' }), /REDIS_URL/)
  assert.strictEqual(buildOptions(parseArgs(['app.js', '--sessions', 'redis']).flags, {}).defaultSessionStore, 'redis')
})

test("defaultSessionStore 'redis': express-session's default store is the Redis store; the count goes on across workers and across a restart of the cluster", async (t) => {
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
  let sid = null
  try {
    const options = { workers: 2, defaultSessionStore: 'redis' }
    const first = await startCluster(fixture, { env: env(options) })
    let cookie = null
    const seen = []
    for (let i = 0; i < 8; i++) {
      const answer = await count(first.port, cookie)
      cookie = answer.cookie
      seen.push(answer.json)
    }
    assert.strictEqual(new Set(seen.map((s) => s.pid)).size, 2, 'both workers served')
    assert.deepStrictEqual(seen.map((s) => s.n), [1, 2, 3, 4, 5, 6, 7, 8])
    assert.doesNotMatch(first.output, /default MemoryStore keeps sessions/)
    sid = decodeURIComponent(cookie.split('=')[1]).replace(/^s:/, '').split('.')[0]
    const stored = JSON.parse(await redis.get('sess:' + sid))
    assert.strictEqual(stored.n, 8, 'the session is in Redis')
    const stats = await first.stats()
    assert.ok(stats.workers.every((w) => w.session && w.session.store === 'redis'), JSON.stringify(stats.workers.map((w) => w.session)))
    await first.stop()

    // A new primary and new workers: the user is still logged in.
    const second = await startCluster(fixture, { env: env(options) })
    assert.strictEqual((await count(second.port, cookie)).json.n, 9)
    await second.stop()
  } finally {
    if (sid) await redis.del('sess:' + sid)
    redis.disconnect()
  }
})
