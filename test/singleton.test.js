'use strict'

/**
 * singleton() without processes: the primary's lease table (one host, and
 * a fleet of two "hosts" on Redis with fresh connections, across a Redis
 * restart on a private redis-server), and the worker-side job driven by
 * several simulated workers (one client per worker pid) through the
 * service's handlers. The cluster runs (kill -9 of the runner, a reload)
 * need the internal service layer.
 */

const { describe, it, after } = require('node:test')
const assert = require('node:assert/strict')
const { LeaseTable } = require('../lib/state/leases')
const { createLocalLeaseBackend } = require('../lib/state/lease-local')
const { createRedisLeaseBackend } = require('../lib/state/lease-redis')
const { singletonService, singletonHandlers } = require('../lib/state/singleton-service')
const { singleton } = require('../lib/state/singleton')
const { singletonStats } = require('../lib/state/singleton-stats')
const { formatSingletonsTable } = require('../lib/cli/banner')
const { clientOf } = require('../lib/state/client')
const { connectRedis } = require('../lib/redis/connect')
const { parseRedisTarget } = require('../lib/redis/target')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix, redisServerSuite, privateRedis } = require('./helpers/redis')
const { eventually } = require('./helpers/wait')

const timing = { waitMs: 5000, leaseMs: 600 }

// The lease timers are unref'd (a primary or a worker has its server and IPC
// channel to keep it alive): this keeps the test process alive in their place.
const alive = setInterval(() => {}, 1000)
after(() => clearInterval(alive))

describe('LeaseTable (one host)', () => {
  it('one holder at a time; the next gets the name when the holder releases, with a larger token', async () => {
    const table = new LeaseTable(createLocalLeaseBackend())
    const first = await table.acquire('job', 101, timing)
    assert.equal(first.granted, true)
    let secondAnswer = null
    const second = table.acquire('job', 102, timing).then((a) => { secondAnswer = a })
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(secondAnswer, null, 'the second asker waits while the first holds')
    assert.deepEqual(await table.acquire('job', 101, timing), first, 'asking again returns the holder its own token')
    assert.equal(table.release('job', 102, first.token), false, 'only the holder releases')
    assert.equal(table.release('job', 101, first.token), true)
    await second
    assert.equal(secondAnswer.granted, true)
    assert.ok(secondAnswer.token > first.token)
    table.close()
  })

  it('a holder that exits frees the name at once; its pending asks are void', async () => {
    const table = new LeaseTable(createLocalLeaseBackend())
    const first = await table.acquire('job', 201, timing)
    const next = table.acquire('job', 202, timing)
    table.ownerGone(201)
    const granted = await next
    assert.equal(granted.granted, true)
    assert.ok(granted.token > first.token)
    const watched = await table.watch('job', 201, first.token, 1000)
    assert.deepEqual(watched, { held: false })
    table.close()
  })

  it('a long poll answers granted: false after waitMs; the name is then free of that asker', async () => {
    const table = new LeaseTable(createLocalLeaseBackend())
    await table.acquire('job', 301, timing)
    assert.deepEqual(await table.acquire('job', 302, { waitMs: 20, leaseMs: 600 }), { granted: false })
    assert.equal(table.list()[0].waiting, 0)
    table.close()
  })

  it('watch answers held: false when the lease is revoked, and the name stays with the holder until it releases', async () => {
    const table = new LeaseTable(createLocalLeaseBackend())
    const first = await table.acquire('job', 401, timing)
    const watching = table.watch('job', 401, first.token, 5000)
    const other = table.acquire('job', 402, timing)
    table.revoke('job')
    assert.deepEqual(await watching, { held: false })
    assert.equal(table.list()[0].owner, 401, 'no second holder before the first released')
    table.release('job', 401, first.token)
    assert.equal((await other).granted, true)
    table.close()
  })

  it('stats: the holder (slot and pid), its token, since when, a local lease, who waits; a lost lease reads stopping', async () => {
    let now = 1_700_000_000_000
    const table = new LeaseTable(createLocalLeaseBackend(), { now: () => now })
    const first = await table.acquire('job', 501, timing)
    const waiting = table.acquire('job', 502, timing)
    now += 2500
    const workers = [{ id: 1, pid: 502 }, { id: 0, pid: 501 }]
    assert.deepEqual(singletonStats({ list: () => table.list() }, workers, now), [{
      name: 'job',
      state: 'held',
      worker: { slot: 0, pid: 501 },
      token: first.token,
      since: new Date(1_700_000_000_000).toISOString(),
      heldMs: 2500,
      lease: 'local',
      waiting: 1
    }])
    table.revoke('job')
    assert.equal(singletonStats({ list: () => table.list() }, workers, now)[0].state, 'stopping')
    table.release('job', 501, first.token)
    const second = await waiting
    const [entry] = singletonStats({ list: () => table.list() }, workers, now)
    assert.deepEqual([entry.state, entry.worker, entry.token, entry.waiting], ['held', { slot: 1, pid: 502 }, second.token, 0])
    // `clusterize status` prints the same, one line per name.
    const text = formatSingletonsTable(singletonStats({ list: () => table.list() }, workers, now))
    assert.match(text, /^singleton\s+state\s+slot\s+pid\s+token\s+held for\s+lease\s+waiting\n/)
    assert.match(text, new RegExp(`\\njob\\s+held\\s+1\\s+502\\s+${second.token}\\s+0s\\s+local\\s+0\\n$`))
    assert.equal(formatSingletonsTable([]), '', 'no section without singletons')
    assert.deepEqual(singletonStats(undefined, workers), [], 'no singleton service (not started here): an empty list')
    table.close()
  })

  it('confirm: the holder with its token holds it, with no time bound on one host; anyone else, or after release, does not', async () => {
    const table = new LeaseTable(createLocalLeaseBackend())
    const granted = await table.acquire('c', 1, { waitMs: 1000, leaseMs: 1000 })
    assert.deepEqual(table.confirm('c', 1, granted.token), { held: true, validMs: null })
    assert.deepEqual(table.confirm('c', 2, granted.token), { held: false, validMs: 0 })
    assert.deepEqual(table.confirm('c', 1, granted.token + 1), { held: false, validMs: 0 })
    table.release('c', 1, granted.token)
    assert.deepEqual(table.confirm('c', 1, granted.token), { held: false, validMs: 0 })
    table.close()
  })

  it('the service refuses malformed requests', () => {
    const handlers = singletonHandlers(new LeaseTable(createLocalLeaseBackend()))
    const caller = { id: 1, pid: 1, generation: 1 }
    assert.throws(() => handlers.acquire({ name: '', waitMs: 10, leaseMs: 1000 }, caller), { code: 'ERR_CLUSTERIZE_SINGLETON_REQUEST' })
    assert.throws(() => handlers.acquire({ name: 'x', waitMs: 10, leaseMs: 1 }, caller), { code: 'ERR_CLUSTERIZE_SINGLETON_REQUEST' })
    assert.throws(() => handlers.release({ name: 'x', token: 'a' }, caller), { code: 'ERR_CLUSTERIZE_SINGLETON_REQUEST' })
  })
})

/** Simulated workers of one primary: one client per pid, over one started service. */
function simulatedWorkers (started, pids) {
  return pids.map((pid) => ({ pid, client: clientOf('singleton', started, { id: pid, pid, generation: 1 }) }))
}

/** A ticking job that records each tick as [pid, token]; the shared `log` also records start/stop. */
function tickingJob (pid, log, tickMs) {
  return function start (signal, token) {
    log.push(['start', pid, token])
    const timer = setInterval(() => log.push(['tick', pid, token]), tickMs)
    signal.addEventListener('abort', () => {
      clearInterval(timer)
      log.push(['stop', pid, token, signal.reason.reason])
    })
  }
}

/** Every run in `log` starts after the previous one stopped, ticks only inside its run, tokens grow. */
function assertOneWriterAtATime (log) {
  let open = null
  let lastToken = 0
  for (const [what, pid, token] of log) {
    if (what === 'start') {
      assert.equal(open, null, `run ${pid}/${token} started while ${open && open.pid}/${open && open.token} was running`)
      assert.ok(token > lastToken, `token ${token} after ${lastToken}`)
      open = { pid, token }
      lastToken = token
    } else if (what === 'tick') {
      assert.ok(open && open.pid === pid && open.token === token, `tick of ${pid}/${token} outside its run`)
    } else if (what === 'stop') {
      assert.ok(open && open.pid === pid && open.token === token, `stop of ${pid}/${token} outside its run`)
      open = null
    }
  }
}

describe('singleton() with simulated workers of one primary', () => {
  it('two workers: one writer at a time; a drain hands over with a larger token and no doubled tick', async () => {
    const started = singletonService.start({})
    const log = []
    const workers = simulatedWorkers(started, [1001, 1002])
    const jobs = workers.map((w) => singleton('ticker', tickingJob(w.pid, log, 20), { client: w.client }))
    try {
      await eventually(() => log.filter((e) => e[0] === 'tick').length >= 5, { what: 'five ticks' })
      const holder = jobs.find((j) => j.running)
      const other = jobs.find((j) => j !== holder)
      const firstToken = holder.token
      await holder.stop('drain')
      await eventually(() => other.running, { what: 'the other worker to take over' })
      assert.ok(other.token > firstToken)
      await eventually(() => log.filter((e) => e[0] === 'tick' && e[2] === other.token).length >= 3, { what: 'ticks of the new holder' })
      const stop = log.find((e) => e[0] === 'stop')
      assert.equal(stop[3], 'drain')
    } finally {
      await Promise.all(jobs.map((j) => j.stop()))
      await started.close()
    }
    assertOneWriterAtATime(log)
  })

  it('a worker that exits (workerExit): another takes over; a start() that throws is restarted elsewhere', async () => {
    const started = singletonService.start({})
    const log = []
    const [a, b] = simulatedWorkers(started, [2001, 2002])
    let failures = 0
    const jobA = singleton('flaky', function start (signal, token) {
      log.push(['start', 2001, token])
      if (failures++ === 0) {
        log.push(['stop', 2001, token])
        throw new Error('first run fails')
      }
      signal.addEventListener('abort', () => log.push(['stop', 2001, token]))
    }, { client: a.client })
    const jobB = singleton('flaky', tickingJob(2002, log, 20), { client: b.client })
    try {
      await eventually(() => log.filter((e) => e[0] === 'start').length >= 2, { what: 'a second run after the failure' })
      // The process of whoever holds now "exits": the primary frees the name.
      const holderPid = jobA.running ? 2001 : 2002
      const holderJob = holderPid === 2001 ? jobA : jobB
      const token = holderJob.token
      holderJob.stopped = true // a dead process asks for nothing more
      started.workerExit({ id: holderPid, pid: holderPid, generation: 1 })
      await eventually(() => log.some((e) => e[0] === 'stop' && e[1] === holderPid && e[2] === token), { what: 'the exited holder to be told' })
      const takeover = holderPid === 2001 ? jobB : jobA
      await eventually(() => takeover.running || log.filter((e) => e[0] === 'start' && e[2] > token).length > 0, { what: 'a takeover with a larger token' })
    } finally {
      await Promise.all([jobA.stop(), jobB.stop()])
      await started.close()
    }
  })

  it('invalid arguments fail at once, naming what is wrong', () => {
    assert.throws(() => singleton('', () => {}), { code: 'ERR_CLUSTERIZE_CONFIG_OPTION', option: 'name' })
    assert.throws(() => singleton('x', null), { code: 'ERR_CLUSTERIZE_CONFIG_OPTION', option: 'start' })
    assert.throws(() => singleton('x', () => {}, { leaseMs: 5 }), { code: 'ERR_CLUSTERIZE_CONFIG_OPTION', option: 'leaseMs' })
  })
})

function redisClient (url, opened) {
  const client = connectRedis(parseRedisTarget(url, 'redis'), { timeoutMs: 300 })
  client.on('error', () => {})
  opened.push(client)
  return client
}

describe('LeaseTable across hosts (Redis)', async () => {
  const options = await redisTestOptions()
  const ns = uniquePrefix('singleton')
  const opened = []
  after(async () => {
    for (const client of opened) client.disconnect()
    if (!options.skip) await deletePrefix(ns)
  })

  it('two hosts, two workers each: one holder in the fleet; a release on one host lets the other take over, larger token', { skip: options.skip }, async () => {
    const hostA = new LeaseTable(createRedisLeaseBackend(redisClient(REDIS_URL, opened), { namespace: ns, hostId: 'A' }))
    const hostB = new LeaseTable(createRedisLeaseBackend(redisClient(REDIS_URL, opened), { namespace: ns, hostId: 'B' }))
    const answers = []
    const asks = [[hostA, 1], [hostA, 2], [hostB, 3], [hostB, 4]].map(([table, pid]) => table.acquire('fleet-job', pid, timing).then((a) => answers.push({ table, pid, a })))
    await eventually(() => answers.some((x) => x.a.granted), { what: 'a first holder' })
    await new Promise((resolve) => setTimeout(resolve, 700))
    const holders = answers.filter((x) => x.a.granted)
    assert.equal(holders.length, 1, 'one holder in the fleet, even after a lease time')
    const first = holders[0]
    // Stats on each host: the holder's host names it and a Redis lease; the other sees it held elsewhere.
    const otherTable = first.table === hostA ? hostB : hostA
    const [held] = singletonStats({ list: () => first.table.list() }, [{ id: 0, pid: first.pid }])
    assert.deepEqual([held.state, held.worker, held.token, held.lease, held.waiting], ['held', { slot: 0, pid: first.pid }, first.a.token, 'redis', 1])
    const [elsewhere] = singletonStats({ list: () => otherTable.list() }, [])
    assert.deepEqual([elsewhere.state, elsewhere.worker, elsewhere.token, elsewhere.lease, elsewhere.waiting], ['held-elsewhere', null, null, 'redis', 2])
    // Its host gives the name to its other worker first (same host, the fleet lease stays).
    first.table.release('fleet-job', first.pid, first.a.token)
    await eventually(() => answers.filter((x) => x.a.granted).length === 2, { what: 'a second holder' })
    const second = answers.filter((x) => x.a.granted)[1]
    assert.ok(second.a.token > first.a.token)
    hostA.close()
    hostB.close()
    await Promise.allSettled(asks)
  })

  it('a name claimed for the first time (one lease of wait) is kept through its renewals, not revoked at the first one', { skip: options.skip }, async () => {
    const host = new LeaseTable(createRedisLeaseBackend(redisClient(REDIS_URL, opened), { namespace: ns, hostId: 'fresh' }))
    try {
      const granted = await host.acquire('first-use', 1, timing)
      assert.equal(granted.granted, true)
      // Watches answer held: false as soon as the lease is lost; three lease times of renewals.
      for (let i = 0; i < 3; i++) {
        assert.deepEqual(await host.watch('first-use', 1, granted.token, timing.leaseMs), { held: true })
        // The holder's worker may count on it for at most two thirds of a lease from the last renewal sent.
        const { held, validMs } = host.confirm('first-use', 1, granted.token)
        assert.ok(held && validMs > 0 && validMs <= timing.leaseMs - Math.floor(timing.leaseMs / 3), `confirmed for ${validMs} ms`)
      }
      assert.equal(host.list()[0].revoked, false)
    } finally {
      host.close()
    }
  })
})

describe('LeaseTable across hosts through a Redis restart', redisServerSuite('Redis-restart singleton test', 60000), () => {
  it('the holder is revoked when Redis goes away; after the restart one host holds again with a larger token', async () => {
    const redis = await privateRedis()
    const opened = []
    await redis.start()
    const hostA = new LeaseTable(createRedisLeaseBackend(redisClient(redis.url, opened), { namespace: 'cz-restart', hostId: 'A' }))
    const hostB = new LeaseTable(createRedisLeaseBackend(redisClient(redis.url, opened), { namespace: 'cz-restart', hostId: 'B' }))
    try {
      const a = await hostA.acquire('job', 1, timing)
      assert.equal(a.granted, true)
      const revoked = hostA.watch('job', 1, a.token, 30000)
      const bAsks = hostB.acquire('job', 2, { waitMs: 30000, leaseMs: 600 })
      await redis.stop()
      assert.deepEqual(await revoked, { held: false }, 'the holder learns it lost the lease')
      hostA.release('job', 1, a.token)
      await redis.start()
      const b = await bAsks
      assert.equal(b.granted, true)
      assert.ok(b.token > a.token, `token ${b.token} after ${a.token}`)
      assert.equal(hostA.list().filter((x) => x.owner !== null).length, 0)
    } finally {
      hostA.close()
      hostB.close()
      for (const client of opened) client.disconnect()
      await redis.stop()
    }
  })
})
