'use strict'

/**
 * node-cron v4's `distributed: true` on the cluster's run coordinator,
 * without processes: the real node-cron, two simulated workers (two
 * coordinators over one started service, as two workers of one primary),
 * claims in Redis for two "hosts", the coordinator installed as node-cron's
 * default (its CommonJS and ESM copies), and the pitfall warning for tasks
 * scheduled without coordination.
 */

const { describe, it, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const cron = require('node-cron')
const { cronService, cronHandlers, RunClaims, RedisRunClaims } = require('../lib/state/cron-service')
const { cronCoordinator, useCronCoordinator, warnOnUncoordinatedCron } = require('../lib/state/cron')
const { clientOf } = require('../lib/state/client')
const { connectRedis } = require('../lib/redis/connect')
const { parseRedisTarget } = require('../lib/redis/target')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
const { eventually } = require('./helpers/wait')

const REPO = path.join(__dirname, '..')

function coordinatorsOver (started, pids) {
  return pids.map((pid) => cronCoordinator({ client: clientOf('cron', started, { id: pid, pid, generation: 1 }) }))
}

/** Schedule `name` every second on each coordinator (one task per simulated worker); fires by slot. */
function scheduleOnEach (coordinators, name) {
  const fires = new Map()
  const tasks = coordinators.map((runCoordinator, worker) => cron.schedule('* * * * * *', (context) => {
    const slot = context.date.toISOString()
    if (!fires.has(slot)) fires.set(slot, [])
    fires.get(slot).push(worker)
  }, { name, distributed: true, runCoordinator }))
  return { fires, tasks }
}

describe('RunClaims', () => {
  it('the first claim of a key wins until its ttl ends', () => {
    let now = 0
    const claims = new RunClaims({ now: () => now })
    assert.equal(claims.claim('job:t1', 1000), true)
    assert.equal(claims.claim('job:t1', 1000), false)
    assert.equal(claims.claim('job:t2', 1000), true)
    now = 1000
    assert.equal(claims.claim('job:t1', 1000), true)
    assert.equal(claims.claims.size, 1, 'ended claims are swept')
  })

  it('a flood of keys fails closed at maxClaims; bad requests are refused', () => {
    const claims = new RunClaims({ maxClaims: 2 })
    claims.claim('a', 1000)
    claims.claim('b', 1000)
    assert.throws(() => claims.claim('c', 1000), { code: 'ERR_CLUSTERIZE_CRON_FULL' })
    const handlers = cronHandlers(claims)
    assert.throws(() => handlers.claim({ key: '', ttlMs: 10 }), { code: 'ERR_CLUSTERIZE_CRON_REQUEST' })
    assert.throws(() => handlers.claim({ key: 'x', ttlMs: 0 }), { code: 'ERR_CLUSTERIZE_CRON_REQUEST' })
  })
})

describe('node-cron distributed: true across simulated workers', () => {
  it('two workers: each fire runs on exactly one of them', async () => {
    const started = cronService.start({})
    const { fires, tasks } = scheduleOnEach(coordinatorsOver(started, [1, 2]), 'every-second')
    try {
      await eventually(() => fires.size >= 3, { what: 'three fires', timeoutMs: 10000 })
    } finally {
      for (const task of tasks) await task.destroy()
      await started.close()
    }
    for (const [slot, workers] of fires) assert.equal(workers.length, 1, `fire ${slot} ran on ${workers.length} workers`)
  })

  it('control: the same tasks without distributed run every fire on both', async () => {
    const fires = new Map()
    const tasks = [0, 1].map((worker) => cron.schedule('* * * * * *', (context) => {
      const slot = context.date.toISOString()
      fires.set(slot, (fires.get(slot) || 0) + 1)
    }, { name: 'uncoordinated-' + worker }))
    try {
      await eventually(() => [...fires.values()].some((n) => n === 2), { what: 'a fire run twice', timeoutMs: 10000 })
    } finally {
      for (const task of tasks) await task.destroy()
    }
  })

  it('a primary that does not answer: node-cron skips the fire (fail closed), nothing throws', async () => {
    const silent = { request: () => new Promise(() => {}), notify () { return false } }
    const runCoordinator = cronCoordinator({ client: silent, timeoutMs: 50 })
    const skipped = []
    let ran = 0
    const task = cron.schedule('* * * * * *', () => { ran++ }, {
      name: 'no-answer',
      distributed: true,
      runCoordinator,
      logger: { info () {}, warn () {}, error () {}, debug () {} }
    })
    task.on('execution:skipped', (context) => skipped.push(context.reason))
    try {
      await eventually(() => skipped.length >= 1, { what: 'a skipped fire', timeoutMs: 10000 })
    } finally {
      await task.destroy()
    }
    assert.equal(ran, 0)
    assert.equal(skipped[0], 'coordinator-error')
  })
})

describe('node-cron distributed: true across hosts (Redis)', async () => {
  const options = await redisTestOptions()
  const prefix = uniquePrefix('cron')
  const opened = []
  after(async () => {
    for (const client of opened) client.disconnect()
    if (!options.skip) await deletePrefix(prefix)
  })

  it('two hosts with two workers each: each fire runs once in the fleet', { skip: options.skip }, async () => {
    const hosts = [0, 1].map(() => {
      const client = connectRedis(parseRedisTarget(REDIS_URL, 'redis'), { timeoutMs: 1000 })
      client.on('error', () => {})
      opened.push(client)
      return { requests: cronHandlers(new RedisRunClaims(client, prefix)) }
    })
    const coordinators = [...coordinatorsOver(hosts[0], [1, 2]), ...coordinatorsOver(hosts[1], [1, 2])]
    const { fires, tasks } = scheduleOnEach(coordinators, 'fleet-second')
    try {
      await eventually(() => fires.size >= 3, { what: 'three fires', timeoutMs: 10000 })
    } finally {
      for (const task of tasks) await task.destroy()
    }
    for (const [slot, workers] of fires) assert.equal(workers.length, 1, `fire ${slot} ran ${workers.length} times`)
  })
})

describe('the coordinator as node-cron\'s default', () => {
  it('installed in the CommonJS and the ESM copy: distributed tasks need no env var and run', async () => {
    const previous = process.env.NODE_CRON_RUN
    delete process.env.NODE_CRON_RUN
    const copies = await useCronCoordinator(REPO)
    assert.equal(copies.length, 2, 'node-cron ships a CommonJS and an ESM build: both get the coordinator')
    const esm = await import('node-cron')
    let ranCjs = 0
    let ranEsm = 0
    const tasks = [
      cron.schedule('* * * * * *', () => { ranCjs++ }, { name: 'default-cjs', distributed: true }),
      esm.schedule('* * * * * *', () => { ranEsm++ }, { name: 'default-esm', distributed: true })
    ]
    try {
      await eventually(() => ranCjs > 0 && ranEsm > 0, { what: 'both tasks to fire', timeoutMs: 10000 })
    } finally {
      for (const task of tasks) await task.destroy()
      for (const copy of copies) copy.setRunCoordinator(undefined)
      if (previous !== undefined) process.env.NODE_CRON_RUN = previous
    }
  })

  it('warns once, naming the fix, when a task runs a fire the coordinator was not asked about', async () => {
    const copies = await useCronCoordinator(REPO)
    const warnings = []
    const log = { warn: (message) => warnings.push(message) }
    const plain = cron.schedule('* * * * * *', () => {}, { name: 'plain-job' })
    const coordinated = cron.schedule('* * * * * *', () => {}, { name: 'coordinated-job', distributed: true })
    try {
      warnOnUncoordinatedCron(copies, log, 2)
      await eventually(() => warnings.length > 0, { what: 'the warning', timeoutMs: 10000 })
      await new Promise((resolve) => setTimeout(resolve, 1500))
    } finally {
      await plain.destroy()
      await coordinated.destroy()
      for (const copy of copies) copy.setRunCoordinator(undefined)
    }
    assert.equal(warnings.length, 1)
    assert.match(warnings[0], /"plain-job"/)
    assert.match(warnings[0], /distributed: true/)
  })

  it('no warning with one worker', async () => {
    const copies = await useCronCoordinator(REPO)
    const warnings = []
    const plain = cron.schedule('* * * * * *', () => {}, { name: 'solo-job' })
    try {
      warnOnUncoordinatedCron(copies, { warn: (m) => warnings.push(m) }, 1)
      await new Promise((resolve) => plain.once('execution:finished', resolve))
    } finally {
      await plain.destroy()
      for (const copy of copies) copy.setRunCoordinator(undefined)
    }
    assert.equal(warnings.length, 0)
  })
})

describe('uncoordinated jobs: the cron package and jobs inside a singleton', () => {
  const { watchCronJobs, unwatchCronJobs } = require('../lib/worker/cron-job-pitfall')
  const { runInSingleton } = require('../lib/state/singleton-context')
  const { CronJob } = require('cron')

  it('a CronJob built in several workers warns once, naming singleton(); one built inside a singleton does not', () => {
    const warnings = []
    try {
      assert.equal(watchCronJobs({ warn: (m) => warnings.push(m) }, 2, REPO), true)
      const inside = runInSingleton('nightly', () => new CronJob('0 0 3 * * *', () => {}))
      assert.equal(warnings.length, 0, 'built inside a singleton: coordinated')
      assert.equal(inside.lastExecution, null, 'the field keeps its value')
      new CronJob('0 0 3 * * *', () => {})
      new CronJob('0 0 4 * * *', () => {})
      assert.equal(warnings.length, 1)
      assert.match(warnings[0], /singleton\(/)
    } finally {
      unwatchCronJobs()
    }
  })

  it('one worker: no warning', () => {
    const warnings = []
    try {
      assert.equal(watchCronJobs({ warn: (m) => warnings.push(m) }, 1, REPO), false)
      new CronJob('0 0 3 * * *', () => {})
      assert.equal(warnings.length, 0)
    } finally {
      unwatchCronJobs()
    }
  })

  it('a node-cron task scheduled inside a singleton is not warned about', async () => {
    const copies = await useCronCoordinator(REPO)
    const warnings = []
    const task = runInSingleton('inside', () => cron.schedule('* * * * * *', () => {}, { name: 'inside-singleton' }))
    try {
      warnOnUncoordinatedCron(copies, { warn: (m) => warnings.push(m) }, 2)
      await new Promise((resolve) => task.once('execution:finished', resolve))
    } finally {
      await task.destroy()
      for (const copy of copies) copy.setRunCoordinator(undefined)
    }
    assert.equal(warnings.length, 0)
  })
})
