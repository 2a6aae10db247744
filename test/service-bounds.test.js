'use strict'

/**
 * The bounds the primary enforces are clusterize() options, validated once
 * at startup (clusterStore, recovery); the old runtime paths (a store's
 * maxSessions/maxTotalBytes, createAdapter({ recovery })) still work.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { resolveConfig } = require('../lib/config')
const { RecoveryService, recoveryOptions } = require('../lib/realtime/recovery-service')
const { sessionService } = require('../lib/session/cluster-service')
const { startCluster } = require('./helpers/cluster')

const FIXTURE = path.join(__dirname, 'fixtures', 'session-big-cluster.js')

describe('clusterStore and recovery options', () => {
  it('are validated at startup, naming the option', () => {
    assert.throws(() => resolveConfig({ clusterStore: { maxSessions: 0 } }), { code: 'ERR_CLUSTERIZE_CONFIG_OPTION', option: 'clusterStore.maxSessions' })
    assert.throws(() => resolveConfig({ clusterStore: { maxTotalBytes: '1mb' } }), { option: 'clusterStore.maxTotalBytes' })
    assert.throws(() => resolveConfig({ clusterStore: { max: 1 } }), { option: 'clusterStore.max' })
    assert.throws(() => resolveConfig({ recovery: { maxPackets: 1.5 } }), { option: 'recovery.maxPackets' })
    assert.throws(() => resolveConfig({ recovery: { liveWaitMs: -1 } }), { option: 'recovery.liveWaitMs' })
    const config = resolveConfig({ clusterStore: { maxSessions: 7 }, recovery: { maxSessions: 9 } })
    assert.throws(() => resolveConfig({ clusterStore: { leaseMs: 60001 } }), { option: 'clusterStore.leaseMs' })
    assert.throws(() => resolveConfig({ clusterStore: { leaseMs: 0.5 } }), { option: 'clusterStore.leaseMs' })
    assert.deepStrictEqual(config.clusterStore, { maxSessions: 7, maxTotalBytes: 128 * 1024 * 1024, leaseMs: 1000 })
    assert.deepStrictEqual(config.recovery, { maxPackets: 10000, maxSessions: 9, liveWaitMs: 5000 })
  })

  it("set the session service's backend bounds", () => {
    const started = sessionService.start({ config: resolveConfig({ clusterStore: { maxSessions: 7, maxTotalBytes: 4096 } }) })
    assert.strictEqual(started.api.maxSessions, 7)
    assert.strictEqual(started.api.maxTotalBytes, 4096)
    started.close()
  })

  it("set every namespace's recovery bounds; a worker's createAdapter({ recovery }) still applies (deprecated)", () => {
    const config = resolveConfig({ recovery: { maxPackets: 3, maxSessions: 4, liveWaitMs: 50 } })
    const service = new RecoveryService({ broadcast () {} }, recoveryOptions(config, undefined))
    const state = service.namespace('/')
    assert.deepStrictEqual([state.maxPackets, state.maxSessions, service.liveWaitMs], [3, 4, 50])
    // An adapter that gives none of its own sends only socket.io's maxDisconnectionDuration.
    service.onQueueMessage({ op: 'cfg', n: '/', d: 60000 }, {})
    assert.deepStrictEqual([state.maxPackets, state.maxSessions, service.liveWaitMs, state.maxDisconnectionDuration], [3, 4, 50, 60000])
    service.onQueueMessage({ op: 'cfg', n: '/a', d: 60000, p: 20, x: 30, l: 70 }, {})
    const other = service.namespace('/a')
    assert.deepStrictEqual([other.maxPackets, other.maxSessions, service.liveWaitMs], [20, 30, 70])
    service.close()
  })
})

/** A logger that keeps what it was told (the primary's logger has this shape). */
function recordingLog () {
  const lines = []
  return { lines, warn (message) { lines.push(message) }, info () {}, error () {} }
}

describe('the primary\'s bounds are counted and logged once when first reached', () => {
  it('rate-limit counters: new keys refused when full', () => {
    const { createRateLimitService } = require('../lib/state/rate-limit-service')
    const log = recordingLog()
    const { counters } = createRateLimitService({ maxKeys: 2, log })
    counters.increment('a', 60000)
    counters.increment('b', 60000)
    for (const key of ['c', 'd', 'e']) assert.throws(() => counters.increment(key, 60000), { code: 'ERR_CLUSTERIZE_RATE_LIMIT_FULL' })
    counters.increment('a', 60000)
    assert.strictEqual(counters.refused, 3)
    assert.strictEqual(log.lines.length, 1)
    assert.match(log.lines[0], /counters are full \(2 clients/)
  })

  it('socket.io recovery: live sessions dropped for recovery.maxSessions (expired ones are not counted)', () => {
    const log = recordingLog()
    const config = resolveConfig({ recovery: { maxSessions: 2 } })
    const service = new RecoveryService({ broadcast () {} }, recoveryOptions(config, log))
    const state = service.namespace('/')
    const now = Date.now()
    for (const pid of ['p1', 'p2', 'p3', 'p4']) state.persist({ sid: 'sid-' + pid, pid, rooms: [], data: {} }, now)
    assert.strictEqual(service.stats().sessionsDropped, 2)
    assert.strictEqual(state.sessions.size, 2)
    state.persist({ sid: 'late', pid: 'p5', rooms: [], data: {} }, now + state.maxDisconnectionDuration * 3)
    assert.strictEqual(service.stats().sessionsDropped, 2, 'sessions that expired are not dropped by the bound')
    assert.strictEqual(log.lines.length, 1)
    assert.match(log.lines[0], /recovery\.maxSessions \(2\) reached/)
    service.close()
  })
})

describe('2-worker cluster with clusterize({ clusterStore })', () => {
  let cluster
  before(async () => {
    cluster = await startCluster(FIXTURE, {
      env: {
        CZ_SESSION_OPTIONS: JSON.stringify({ store: 'cluster' }),
        CZ_TEST_OPTIONS: JSON.stringify({ probes: { port: 0 }, clusterStore: { maxSessions: 2, maxTotalBytes: 200 * 1024 } })
      }
    })
  })
  after(async () => {
    if (cluster) await cluster.stop()
  })

  it("the primary holds at most maxSessions; a session over maxTotalBytes is refused with 413, not 503", async () => {
    for (let i = 0; i < 3; i++) assert.equal((await cluster.get('/big?kb=1', { method: 'POST' })).status, 200)
    const stats = JSON.parse((await cluster.probe('/stats')).body)
    assert.equal(stats.sessions.maxSessions, 2, 'the bound set at startup, no worker sent one')
    assert.equal(stats.sessions.maxTotalBytes, 200 * 1024)
    assert.equal(stats.sessions.sessions, 2)
    assert.equal(stats.sessions.evicted, 1)
    // Counted in /stats and /metrics, logged once however often it evicts.
    assert.deepStrictEqual(stats.bounds, { sessionsEvicted: 1, rateLimitKeysRefused: 0, recoverySessionsDropped: 0, recoveryUnsentDropped: 0 })
    for (let i = 0; i < 2; i++) assert.equal((await cluster.get('/big?kb=1', { method: 'POST' })).status, 200)
    const metrics = (await cluster.probe('/metrics')).body
    assert.match(metrics, /^clusterize_primary_bound_reached_total\{bound="sessions"\} 3$/m)
    assert.match(metrics, /^clusterize_primary_bound_reached_total\{bound="rate_limit_keys"\} 0$/m)
    await cluster.waitOutput(/clusterStore\.maxSessions \(2\) or clusterStore\.maxTotalBytes \(204800\) reached/)
    assert.equal(cluster.output.match(/clusterStore\.maxSessions \(2\) or clusterStore\.maxTotalBytes/g).length, 1, 'logged once')
    const big = await cluster.get('/big?kb=300', { method: 'POST' })
    assert.equal(big.status, 413, big.body)
    assert.match(big.json.error, /^session too large: .*clusterStore\.maxTotalBytes/)
  })
})
