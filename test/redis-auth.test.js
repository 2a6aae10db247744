'use strict'

/**
 * Starting with Redis unreachable, or with a wrong password (a private
 * redis-server with requirepass, on a free loopback port, killed by PID):
 * session requests get 503 with Retry-After and an error naming the cause,
 * workers keep running, and the logs say it once per outage (one line for
 * the session store, one for the bus bridge), not once per reconnect.
 */

const { describe, it, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const { privateRedis, redisServerSuite } = require('./helpers/redis')
const { freePort } = require('./helpers/net')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')

const FIXTURE = path.join(__dirname, 'fixtures', 'session-cluster.js')

function lines (output, pattern) {
  return output.split('\n').filter((line) => pattern.test(line))
}

/** Start 2 workers whose sessions and bus point at `url`; let the reconnect loop run for a while. */
async function clusterOn (url) {
  const cluster = await startCluster(FIXTURE, {
    env: {
      CZ_SESSION_OPTIONS: JSON.stringify({ store: 'redis', redis: url }),
      CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, bus: { redis: url }, health: { heartbeatMs: 200, heartbeatTimeoutMs: 5000 } })
    }
  })
  const first = await cluster.get('/count')
  await cluster.waitOutput(/session store redis unavailable/)
  await cluster.waitOutput(/bus: Redis bridge/)
  // Many more requests and heartbeats (each worker reports every 200 ms) while
  // the clients keep reconnecting: none of it may add a log line.
  const answers = [first]
  for (let i = 0; i < 40; i++) {
    answers.push(await cluster.get('/count'))
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return { cluster, answers }
}

describe('Redis refusing us at startup', redisServerSuite('Redis tests', 60000), () => {
  after(() => stopAll())

  it('a wrong password: 503 naming WRONGPASS with a hint, one log line for the store and one for the bus', async () => {
    const redis = await privateRedis({ args: ['--requirepass', 'the-right-one'] })
    await redis.start()
    try {
      const { cluster, answers } = await clusterOn(`redis://:the-wrong-one@127.0.0.1:${redis.port}`)
      const pidsBefore = (await cluster.stats()).workers.map((w) => w.pid).sort()
      for (const res of answers) {
        assert.equal(res.status, 503)
        assert.ok(res.headers['retry-after'], 'a 503 says when to retry')
        assert.match(res.json.error, /^session store unavailable: redis: WRONGPASS .*\(the password \(or ACL user\) in the redis option or URL is wrong\)/)
      }
      assert.equal(lines(cluster.output, /session store redis unavailable/).length, 1, 'one line for the session store outage:\n' + cluster.output)
      const busLines = lines(cluster.output, /bus: Redis bridge/)
      assert.equal(busLines.length, 1, 'one line for the bus outage:\n' + cluster.output)
      assert.match(busLines[0], /cannot connect its (publisher|subscriber): WRONGPASS/)
      assert.doesNotMatch(cluster.output, /the-wrong-one/, 'the password is never logged')
      assert.deepEqual((await cluster.stats()).workers.map((w) => w.pid).sort(), pidsBefore, 'no worker crashed')
    } finally {
      await redis.stop()
    }
  })

  it('no password where one is required: 503 naming NOAUTH and how to pass the password', async () => {
    const redis = await privateRedis({ args: ['--requirepass', 'the-right-one'] })
    await redis.start()
    try {
      const { answers } = await clusterOn(`redis://127.0.0.1:${redis.port}`)
      assert.equal(answers[0].status, 503)
      assert.match(answers[0].json.error, /NOAUTH .*Redis requires a password/)
    } finally {
      await redis.stop()
    }
  })

  it('nothing listening: 503 naming ECONNREFUSED, one log line each, and sessions work once Redis comes', async () => {
    const port = await freePort()
    const { cluster, answers } = await clusterOn(`redis://127.0.0.1:${port}`)
    for (const res of answers) {
      assert.equal(res.status, 503)
      assert.match(res.json.error, /ECONNREFUSED .*nothing listens there/)
    }
    assert.equal(lines(cluster.output, /session store redis unavailable/).length, 1, cluster.output)
    assert.equal(lines(cluster.output, /bus: Redis bridge/).length, 1, cluster.output)

    // The same port, now served: recovery needs no restart.
    const redis = await privateRedis({ port })
    try {
      await redis.start()
      const served = await eventually(async () => {
        const res = await cluster.get('/count')
        return res.status === 200 && res
      }, { timeoutMs: 20000, what: 'sessions to work once Redis listens' })
      assert.equal(served.json.visits, 1)
      await cluster.waitOutput(/session store redis available again/)
    } finally {
      await redis.stop()
    }
  })
})
