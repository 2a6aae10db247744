'use strict'

/**
 * What the Sentinel and Redis Cluster tests share: two bus clusters bridged
 * over one Redis target, and the failover-under-load scenario (2 workers
 * serving checked session traffic while the topology fails over).
 */

const path = require('path')
const crypto = require('crypto')
const assert = require('node:assert/strict')
const { startCluster } = require('./cluster')
const { logInUsers, runSessionLoad, visitAll, markSynced } = require('./session-load')
const { eventually } = require('./wait')

const SESSION_FIXTURE = path.join(__dirname, '..', 'fixtures', 'session-cluster.js')
const BUS_FIXTURE = path.join(__dirname, '..', 'fixtures', 'bus-cluster.js')

/** A store operation as a promise. */
function call (store, op, ...args) {
  return new Promise((resolve, reject) => store[op](...args, (err, value) => err ? reject(err) : resolve(value)))
}

function busDriver (cluster) {
  return async (target, action, args) => {
    const reply = await cluster.command({ type: 'bus-test:do', target, action, args }, 'bus-test:reply', 30000)
    if (reply.error) throw new Error(`${action} on ${target} failed: ${reply.error.message}`)
    return reply.result
  }
}

/**
 * Two clusters (2 workers each) whose buses are bridged over `redis`.
 * @param {string} redis a Redis target URL
 * @param {object} [env] more fixture env (BUS_SHARDED)
 */
async function twoBusClusters (redis, env) {
  const channel = 'cz:bus:' + crypto.randomBytes(4).toString('hex')
  const busEnv = Object.assign({ BUS_WORKERS: '2', BUS_REDIS: redis, BUS_CHANNEL: channel }, env)
  const a = await startCluster(BUS_FIXTURE, { env: busEnv })
  const b = await startCluster(BUS_FIXTURE, { env: busEnv }).catch(async (err) => {
    await a.stop()
    throw err
  })
  const runA = busDriver(a)
  return {
    channel,
    runA,
    runB: busDriver(b),
    /** A's bridge status once it is connected. */
    connected: () => eventually(async () => {
      const status = (await runA('primary', 'status')).bridge
      return status && status.connected && status
    }, { what: 'bridge A to connect' }),
    stop: () => Promise.all([a.stop(), b.stop()])
  }
}

/** Broadcast from A's worker 0 until B's worker 1 has it (a subscription may still be settling). */
async function broadcastReaches (pair, marker) {
  let n = 0
  return eventually(async () => {
    await pair.runA(0, 'broadcast', { topic: 't:b', data: { marker: `${marker}:${n++}` } })
    await new Promise((resolve) => setTimeout(resolve, 100))
    const got = await pair.runB(1, 'received')
    return got.find((r) => r.data && typeof r.data.marker === 'string' && r.data.marker.startsWith(marker + ':'))
  }, { timeoutMs: 30000, intervalMs: 200, what: `a broadcast "${marker}" from cluster A to reach cluster B` })
}

/**
 * 2 workers on the Redis store serve 20 logged-in users (every request reads
 * and writes the session) while `failOver(channel)` kills the primary or a
 * master; two bus clusters talk over the same Redis. Asserts: no wrong
 * answer (a 503 carries Retry-After; see session-load.js for what async
 * replication may roll back), every user served again by itself, every
 * session kept, the bus flowing again, no worker replaced.
 * @param {{ url: string, label: string, syncReplicas: () => Promise<void>, failOver: (channel: string) => Promise<*> }} topology
 */
async function failoverUnderLoad (topology) {
  const prefix = 'cz-fo-' + crypto.randomBytes(3).toString('hex') + ':'
  const sessions = await startCluster(SESSION_FIXTURE, {
    env: { CZ_SESSION_OPTIONS: JSON.stringify({ store: 'redis', redis: topology.url, prefix }), CZ_TEST_OPTIONS: JSON.stringify({ workers: 2 }) }
  })
  let pair = null
  try {
    pair = await twoBusClusters(topology.url)
    await broadcastReaches(pair, 'before')
    const workersBefore = (await sessions.stats()).workers.map((w) => w.pid).sort()

    const users = await logInUsers(sessions.port, 20, topology.label)
    assert.deepEqual(await visitAll(sessions.port, users), users.map(() => 'ok'))
    // What the replicas hold now must survive the failover; later writes may be lost with the
    // old primary (Redis replicates asynchronously) and are counted as rolled back, not wrong.
    await topology.syncReplicas()
    markSynced(users)

    const load = runSessionLoad(sessions.port, users)
    await eventually(() => load.tally.ok >= 40, { what: 'session traffic before the failover' })
    await topology.failOver(pair.channel)
    const okAtFailover = load.tally.ok
    await eventually(() => load.tally.ok >= okAtFailover + 100, { timeoutMs: 30000, what: 'session traffic after the failover' })
    const tally = await load.stop()
    assert.deepEqual(tally.wrong, [], 'no wrong answer: no silent new session, no other user\'s session, nothing older than the replicas held, no 500')

    // Recovered by itself: every session written before the failover is there.
    const outcomes = await eventually(async () => {
      const round = await visitAll(sessions.port, users)
      return round.every((o) => o === 'ok') && round
    }, { timeoutMs: 20000, what: 'every user served again after the failover' })
    assert.equal(outcomes.length, users.length)
    await broadcastReaches(pair, 'after')
    assert.deepEqual((await sessions.stats()).workers.map((w) => w.pid).sort(), workersBefore, 'no worker crashed or was replaced')
  } finally {
    await Promise.all([sessions.stop(), pair && pair.stop()])
  }
}

module.exports = { call, twoBusClusters, broadcastReaches, failoverUnderLoad }
