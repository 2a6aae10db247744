'use strict'

/**
 * Run one schedule: start the cluster(s) (and a private redis-server when
 * the schedule needs one, never the shared one), drive the service with
 * concurrent clients, inject the faults, stop, check the history.
 * Every process started here is stopped by PID before this returns.
 */

const fs = require('fs')
const os = require('os')
const path = require('path')
const { History } = require('./history')
const { startHistoryCluster } = require('./cluster')
const { startCollector } = require('./collector')
const { seededRandom, sessionClients, leaseProbeClient, rateLimitClients, busSenders, socketIoClients, sleep } = require('./clients')
const { runFaults } = require('./faults')
const { checkCounter, checkRateLimit, checkSingleton, checkOrder } = require('./checkers')
const { privateRedis } = require('../helpers/redis')

/** After the clients stop: time for the last reports (bus receipts, fenced writes) to reach the collector. */
const SETTLE_MS = 1500

/**
 * @param {object} schedule see ./schedules.js
 * @param {{ seed?: number, log?: (line: string) => void }} [options]
 * @returns {Promise<{ name: string, service: string, ops: number, faults: object[], anomalies: object[], history: History }>}
 */
async function runSchedule (schedule, { seed = 1, log = () => {} } = {}) {
  const history = new History()
  const random = seededRandom(seed)
  const clusters = []
  let redis = null
  let collector = null
  let dir = null
  let clients = null
  try {
    if (schedule.redis) {
      // Append-only, fsync'd on every write: a SIGKILLed Redis loses nothing it acknowledged.
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-history-redis-'))
      // `redisRestartsEmpty`: no persistence, a killed Redis comes back without what it held.
      const args = schedule.redisRestartsEmpty ? ['--dir', dir] : ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir]
      redis = await (await privateRedis({ args })).start()
    }
    if (schedule.service === 'singleton' || schedule.service === 'bus') collector = await startCollector(history)
    const options = Object.assign({}, schedule.cluster)
    if (collector) options.collector = collector.port
    if (redis && schedule.service === 'session') Object.assign(options, { redisUrl: redis.url, redisPrefix: 'history:' })
    if (redis && (schedule.service === 'singleton' || schedule.service === 'socketio')) options.busRedis = redis.url
    for (let host = 0; host < (schedule.hosts || 1); host++) clusters.push(await startHistoryCluster(options))
    log(`${schedule.name}: cluster ready on port ${clusters.map((c) => c.port).join(', ')}`)
    const drive = { cluster: clusters[0], clusters, history, random }
    if (schedule.service === 'session') clients = await sessionClientsWithProbe(drive, schedule)
    else if (schedule.service === 'rate-limit') clients = await rateLimitClients(Object.assign(drive, schedule.clients))
    else if (schedule.service === 'bus') clients = await busSenders(Object.assign(drive, schedule.clients))
    else if (schedule.service === 'socketio') clients = await socketIoClients(Object.assign(drive, schedule.clients))
    else if (schedule.service === 'singleton') await waitForHolder(history)
    const startedAt = Date.now()
    await runFaults({ schedule: schedule.faults, clusters, redis, history, random, startedAt })
    const left = startedAt + schedule.durationMs - Date.now()
    if (left > 0) await sleep(left)
    if (clients) await clients.stop()
    clients = null
    await sleep(SETTLE_MS)
    const anomalies = check(schedule, history)
    return { name: schedule.name, service: schedule.service, ops: history.ops().length, faults: history.faults, anomalies, history }
  } finally {
    if (clients) await clients.stop()
    for (const cluster of clusters) await cluster.stop()
    if (collector) await collector.close()
    if (redis) await redis.stop()
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** The session clients, and issue 51's reproduction alongside when the schedule asks for it (`probe`). */
async function sessionClientsWithProbe (drive, schedule) {
  const clients = await sessionClients(Object.assign({}, drive, schedule.clients))
  const probe = schedule.probe ? await leaseProbeClient(drive) : null
  return { stop: () => Promise.all([clients.stop(), probe && probe.stop()]) }
}

function check (schedule, history) {
  const ops = history.ops()
  switch (schedule.service) {
    case 'session': return checkCounter(ops)
    case 'rate-limit': return checkRateLimit(ops, { limit: schedule.cluster.rateLimit.limit })
    case 'singleton': return checkSingleton(ops)
    case 'bus': return checkOrder(ops)
    case 'socketio': return checkOrder(ops, { acknowledgedOnly: true })
  }
  throw new Error(`no checker for service ${schedule.service}`)
}

async function waitForHolder (history) {
  for (let i = 0; i < 300; i++) {
    if (history.ops().some((o) => o.op === 'write')) return
    await sleep(100)
  }
  throw new Error('no singleton holder wrote within 30 s')
}

module.exports = { runSchedule }
