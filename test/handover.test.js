'use strict'

/**
 * What crosses `clusterize upgrade` (lib/primary/handover.js): every service
 * of lib/services/list.js declares it, and each handed-over state comes out of
 * one primary's service and into another's whole. The upgrade itself, with real
 * primaries, is in test/upgrade.test.js.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { SERVICES } = require('../lib/services/list')
const { createServiceHost } = require('../lib/services/host')
const { undeclared, CROSSES } = require('../lib/primary/handover')
const { DEFAULTS } = require('../lib/config')
const { RateLimitCounters } = require('../lib/state/rate-limit-counters')
const { RunClaims } = require('../lib/state/cron-service')
const { RetainedTotals } = require('../lib/state/metrics/retained')
const { LeaseTable } = require('../lib/state/leases')
const { createLocalLeaseBackend } = require('../lib/state/lease-local')
const { exportLeases, importLeases } = require('../lib/state/singleton-handover')

test('every service in lib/services/list.js declares how its state crosses an upgrade', () => {
  assert.deepStrictEqual(undeclared(SERVICES), [])
  for (const definition of SERVICES) assert.ok(Object.values(CROSSES).includes(definition.handover.crosses), definition.name)
})

test('a service that declares nothing, or says nothing about what crosses, is named', () => {
  const problems = undeclared([{ name: 'quiet', start () {} }, { name: 'vague', handover: { crosses: 'rebuilt' }, start () {} }, { name: 'fine', handover: { crosses: 'none', what: 'a cache' }, start () {} }])
  assert.strictEqual(problems.length, 2)
  assert.match(problems[0], /service "quiet" declares no handover/)
  assert.match(problems[1], /service "vague": handover.what/)
})

test('every handed-over service gives export() and import() when it starts: one mechanism carries them all', async () => {
  const host = createServiceHost(SERVICES, { config: DEFAULTS })
  try {
    const declared = SERVICES.filter((s) => s.handover.crosses === CROSSES.HANDED_OVER).map((s) => s.name)
    assert.deepStrictEqual(host.handedOver().sort(), declared.sort())
    assert.deepStrictEqual(declared.sort(), ['cron', 'metrics', 'rate-limit', 'recovery', 'session', 'singleton'])
  } finally {
    await host.close()
  }
})

test('rate-limit hits move whole to the new primary: limit 100 stays 100 (a key hit on both sides keeps both counts)', () => {
  let now = 1000000
  const old = new RateLimitCounters({ now: () => now })
  for (let i = 0; i < 60; i++) old.increment('ip:a', 60000)
  old.increment('ip:b', 10)
  const fresh = new RateLimitCounters({ now: () => now })
  fresh.increment('ip:a', 60000)
  now += 20
  fresh.importEntries(JSON.parse(JSON.stringify(old.exportEntries())))
  assert.strictEqual(fresh.get('ip:a').totalHits, 61)
  assert.strictEqual(fresh.get('ip:b'), undefined, 'an ended window is not handed over')
  assert.strictEqual(fresh.increment('ip:a', 60000).totalHits, 62)
  assert.strictEqual(fresh.get('ip:a').resetTime, old.get('ip:a').resetTime)
})

test('cron claims move to the new primary: a fire claimed on the old one is not claimed again', () => {
  const old = new RunClaims()
  assert.strictEqual(old.claim('job:2026-01-01T00:00:00.000Z', 60000), true)
  const fresh = new RunClaims()
  fresh.importClaims(JSON.parse(JSON.stringify(old.exportClaims())))
  assert.strictEqual(fresh.claim('job:2026-01-01T00:00:00.000Z', 60000), false)
  assert.strictEqual(fresh.claim('job:2026-01-01T00:00:01.000Z', 60000), true)
})

test('singleton leases move to the new primary: its workers wait until the old holder released it, and get a larger token', async () => {
  const old = new LeaseTable(createLocalLeaseBackend())
  const granted = await old.acquire('job', 101, { waitMs: 1000, leaseMs: 1000 })
  assert.strictEqual(granted.granted, true)
  const waiting = old.acquire('job', 102, { waitMs: 5000, leaseMs: 1000 })
  const items = exportLeases(old)
  assert.deepStrictEqual(await waiting, { granted: false }, 'a pending ask is answered: the worker asks again, of the new primary')

  const fresh = new LeaseTable(createLocalLeaseBackend(() => 0))
  importLeases(fresh, JSON.parse(JSON.stringify(items)))
  const asking = fresh.acquire('job', 201, { waitMs: 5000, leaseMs: 1000 })
  let answer = null
  asking.then((value) => { answer = value })
  await new Promise((resolve) => setTimeout(resolve, 50))
  assert.strictEqual(answer, null, 'no second holder while the old one holds')
  assert.deepStrictEqual(await fresh.acquire('job', 101, { waitMs: 1000, leaseMs: 1000 }), { granted: true, token: granted.token }, 'the old holder keeps its token')
  assert.strictEqual(fresh.release('job', 101, granted.token), true)
  const next = await asking
  assert.strictEqual(next.granted, true)
  assert.ok(next.token > granted.token, `token ${next.token} after ${granted.token}, with a clock behind`)
  fresh.close()
  old.close()
})

test('a summary\'s _count and _sum stay in the totals when its worker is gone; its quantiles do not', () => {
  const totals = new RetainedTotals()
  const summary = (count, sum) => ({
    name: 'latency',
    help: 'h',
    type: 'summary',
    values: [
      { labels: { quantile: 0.5 }, value: 0.3 },
      { metricName: 'latency_sum', labels: {}, value: sum },
      { metricName: 'latency_count', labels: {}, value: count }
    ]
  })
  totals.fold([summary(5, 1.5)])
  totals.fold([summary(3, 0.5)])
  const [held] = totals.snapshot()
  assert.strictEqual(held.type, 'summary')
  assert.deepStrictEqual(held.values.map((v) => [v.metricName, v.value]), [['latency_sum', 2], ['latency_count', 8]])
  const copy = new RetainedTotals()
  copy.add(JSON.parse(JSON.stringify(totals.snapshot())))
  assert.deepStrictEqual(copy.snapshot(), totals.snapshot())
})
