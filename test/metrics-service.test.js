'use strict'

/**
 * The primary's app-metrics aggregation on its own, with no process: real
 * prom-client registries stand for the workers, their getMetricsAsJSON()
 * data goes to a MetricsService through plain calls (what the services
 * layer carries between processes), and the text it renders is read back
 * the way Prometheus reads it.
 */

const test = require('node:test')
const assert = require('node:assert')
const client = require('prom-client')
const { MetricsService } = require('../lib/state/metrics/service')
const { OP } = require('../lib/state/metrics/ops')
const { RetainedTotals } = require('../lib/state/metrics/retained')
const { cleanSnapshot } = require('../lib/state/metrics/snapshot')
const { renderAggregate, renderWorker } = require('../lib/state/metrics/render')
const { startMetricsReporter, findRegistries } = require('../lib/state/metrics/reporter')

/** One stand-in worker: its own registry with the app's usual metrics. */
function makeWorker (key, slot) {
  const registry = new client.Registry()
  const requests = new client.Counter({ name: 'app_requests_total', help: 'requests', labelNames: ['route'], registers: [registry] })
  const latency = new client.Histogram({ name: 'app_latency_seconds', help: 'latency', buckets: [0.1, 1], registers: [registry] })
  const inFlight = new client.Gauge({ name: 'app_in_flight', help: 'in flight', registers: [registry] })
  const version = new client.Gauge({ name: 'app_version', help: 'version', aggregator: 'first', registers: [registry] })
  version.set(7)
  return { key, slot, pid: 1000 + slot, generation: 1, registry, requests, latency, inFlight, blocked: false }
}

/** A cluster of stand-in workers wired to a service through in-process calls. */
function makeCluster (count, options) {
  const workers = new Map()
  const service = new MetricsService({
    timeoutMs: (options && options.timeoutMs) || 200,
    live: () => Array.from(workers.values()).map(({ key, slot, pid, generation }) => ({ key, slot, pid, generation })),
    send (key, op, data) {
      const worker = workers.get(key)
      assert.strictEqual(op, OP.COLLECT)
      if (worker.blocked) return
      worker.registry.getMetricsAsJSON().then((metrics) => service.report(key, { seq: data.seq, metrics }))
    }
  })
  const cluster = {
    service,
    workers,
    add (slot) {
      const worker = makeWorker('w' + slot + ':' + Math.random(), slot)
      workers.set(worker.key, worker)
      return worker
    },
    /** The interval push a worker makes. */
    async push (worker) {
      service.report(worker.key, { seq: 0, metrics: await worker.registry.getMetricsAsJSON() })
    },
    gone (worker) {
      workers.delete(worker.key)
      service.workerGone(worker.key)
    },
    async scrape () {
      return parse(await renderAggregate(await service.collect()))
    }
  }
  for (let slot = 1; slot <= count; slot++) cluster.add(slot)
  return cluster
}

/** Prometheus text -> Map of 'name{labels}' -> number. */
function parse (text) {
  const series = new Map()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    series.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return series
}

test('counters and histograms are summed, gauges follow their aggregator, in one scrape', async () => {
  const cluster = makeCluster(2)
  const [a, b] = cluster.workers.values()
  for (const worker of [a, b]) await cluster.push(worker)
  a.requests.inc({ route: '/x' }, 3)
  b.requests.inc({ route: '/x' }, 4)
  b.requests.inc({ route: '/y' })
  a.latency.observe(0.05)
  b.latency.observe(0.5)
  b.latency.observe(5)
  a.inFlight.set(2)
  b.inFlight.set(5)
  const series = await cluster.scrape()
  assert.strictEqual(series.get('app_requests_total{route="/x"}'), 7)
  assert.strictEqual(series.get('app_requests_total{route="/y"}'), 1)
  assert.strictEqual(series.get('app_latency_seconds_bucket{le="0.1"}'), 1)
  assert.strictEqual(series.get('app_latency_seconds_bucket{le="1"}'), 2)
  assert.strictEqual(series.get('app_latency_seconds_bucket{le="+Inf"}'), 3)
  assert.strictEqual(series.get('app_latency_seconds_count'), 3)
  assert.strictEqual(series.get('app_latency_seconds_sum'), 5.55)
  assert.strictEqual(series.get('app_in_flight'), 7)
  assert.strictEqual(series.get('app_version'), 7)
  assert.strictEqual(series.get('clusterize_app_metrics_retained_workers_total'), 0)
  assert.ok(![...series.keys()].some((key) => key.startsWith('clusterize_app_metrics_missing{')))
})

test('a scrape reads values counted after the last push: it asks every worker that reported', async () => {
  const cluster = makeCluster(2)
  for (const worker of cluster.workers.values()) await cluster.push(worker)
  for (const worker of cluster.workers.values()) worker.requests.inc({ route: '/' }, 5)
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/"}'), 10)
})

test('a gone worker\'s counters and histograms stay in the totals; its gauges leave', async () => {
  const cluster = makeCluster(2)
  const [a, b] = cluster.workers.values()
  a.requests.inc({ route: '/' }, 10)
  b.requests.inc({ route: '/' }, 5)
  a.latency.observe(0.5)
  a.inFlight.set(3)
  b.inFlight.set(1)
  for (const worker of [a, b]) await cluster.push(worker)
  const before = await cluster.scrape()
  assert.strictEqual(before.get('app_requests_total{route="/"}'), 15)

  // Its replacement starts from zero, as after a crash, recycle or reload.
  cluster.gone(a)
  const c = cluster.add(1)
  await cluster.push(c)
  const after = await cluster.scrape()
  assert.strictEqual(after.get('app_requests_total{route="/"}'), 15)
  assert.strictEqual(after.get('app_latency_seconds_count'), 1)
  assert.strictEqual(after.get('app_latency_seconds_bucket{le="1"}'), 1)
  assert.strictEqual(after.get('app_in_flight'), 1)
  assert.strictEqual(after.get('clusterize_app_metrics_retained_workers_total'), 1)

  c.requests.inc({ route: '/' }, 2)
  cluster.gone(b)
  const last = await cluster.scrape()
  assert.strictEqual(last.get('app_requests_total{route="/"}'), 17)
  assert.strictEqual(last.get('clusterize_app_metrics_retained_workers_total'), 2)
})

test('a report that arrives after its worker is gone is not counted twice', async () => {
  const cluster = makeCluster(1)
  const [a] = cluster.workers.values()
  a.requests.inc({ route: '/' }, 4)
  await cluster.push(a)
  cluster.gone(a)
  await cluster.push(a)
  const b = cluster.add(2)
  await cluster.push(b)
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/"}'), 4)
})

test('a worker that does not answer in time: the scrape answers with its last values and names it', async () => {
  const cluster = makeCluster(2, { timeoutMs: 100 })
  const [a, b] = cluster.workers.values()
  a.requests.inc({ route: '/' }, 1)
  b.requests.inc({ route: '/' }, 2)
  for (const worker of [a, b]) await cluster.push(worker)
  b.blocked = true
  b.requests.inc({ route: '/' }, 100)
  a.requests.inc({ route: '/' }, 1)
  const series = await cluster.scrape()
  assert.strictEqual(series.get('app_requests_total{route="/"}'), 4)
  assert.strictEqual(series.get(`clusterize_app_metrics_missing{worker="${b.slot}",pid="${b.pid}"}`), 1)
  assert.strictEqual(series.get(`clusterize_app_metrics_missing{worker="${a.slot}",pid="${a.pid}"}`), undefined)
})

test('concurrent scrapes share one round of questions to the workers', async () => {
  const cluster = makeCluster(2)
  for (const worker of cluster.workers.values()) await cluster.push(worker)
  let asked = 0
  const send = cluster.service.send
  cluster.service.send = function countingSend (...args) {
    asked++
    return send.apply(this, args)
  }
  const results = await Promise.all([cluster.service.collect(), cluster.service.collect(), cluster.service.collect()])
  assert.strictEqual(asked, 2)
  for (const result of results) assert.strictEqual(result.workers.length, 2)
})

test('workers that never reported (no prom-client) are not asked and the scrape has no app lines', async () => {
  const cluster = makeCluster(2)
  cluster.service.send = () => assert.fail('a worker without metrics was asked')
  const collection = await cluster.service.collect()
  assert.deepStrictEqual(collection.workers, [])
  assert.strictEqual(await renderAggregate(collection), '')
})

test('malformed reports are dropped, never passed to prom-client', async () => {
  const cluster = makeCluster(1, { timeoutMs: 20 })
  const [a] = cluster.workers.values()
  // Its answer would replace the report below.
  a.blocked = true
  cluster.service.report(a.key, {
    seq: 0,
    metrics: [
      { name: 'ok_total', help: 'ok', type: 'counter', values: [{ value: 1, labels: {} }] },
      { name: 'bad aggregator', type: 'gauge', aggregator: 'nope', values: [] },
      { name: 'x', type: 'gauge', aggregator: 'nope', values: [] },
      { name: 'clusterize_requests_total', type: 'counter', values: [{ value: 9, labels: {} }] },
      { name: 'y', type: 'weird', values: [] },
      null,
      'text',
      { name: 'z', type: 'counter', values: [{ value: 'NaN' }, { value: 2, labels: { a: {} } }, { value: 3, labels: { a: 'b' } }] }
    ]
  })
  const series = parse(await renderAggregate(await cluster.service.collect()))
  assert.strictEqual(series.get('ok_total'), 1)
  assert.strictEqual(series.get('z{a="b"}'), 3)
  assert.strictEqual(series.get('clusterize_requests_total'), undefined)
  assert.strictEqual(series.get('x'), undefined)
  cluster.service.report(a.key, { seq: 0, metrics: 'not an array' })
  cluster.service.report(a.key, null)
  assert.deepStrictEqual(cleanSnapshot({}), [])
})

test('retained totals: label order does not split a series; a gauge-only worker adds no retained worker', () => {
  const retained = new RetainedTotals()
  retained.fold([{ name: 'c_total', help: 'c', type: 'counter', aggregator: 'sum', values: [{ value: 1, labels: { a: '1', b: '2' } }] }])
  retained.fold([{ name: 'c_total', help: 'c', type: 'counter', aggregator: 'sum', values: [{ value: 2, labels: { b: '2', a: '1' } }] }])
  retained.fold([{ name: 'g', help: 'g', type: 'gauge', aggregator: 'sum', values: [{ value: 2, labels: {} }] }])
  retained.fold([{ name: 'm_total', help: 'm', type: 'counter', aggregator: 'max', values: [{ value: 2, labels: {} }] }])
  const snapshot = retained.snapshot()
  assert.strictEqual(snapshot.length, 1)
  assert.deepStrictEqual(snapshot[0].values, [{ value: 3, labels: { a: '1', b: '2' } }])
  assert.strictEqual(retained.workers, 2)
})

test('the per-worker view shows one worker\'s own values', async () => {
  const cluster = makeCluster(2)
  const [a, b] = cluster.workers.values()
  a.requests.inc({ route: '/' }, 3)
  b.requests.inc({ route: '/' }, 4)
  for (const worker of [a, b]) await cluster.push(worker)
  const collection = await cluster.service.collect()
  const view = parse(await renderWorker(collection.workers.find((w) => w.slot === b.slot)))
  assert.strictEqual(view.get('app_requests_total{route="/"}'), 4)
})

test('the reporter answers a scrape\'s question and pushes on its interval, from the registries it is given', async () => {
  const registry = new client.Registry()
  const counter = new client.Counter({ name: 'r_total', help: 'r', registers: [registry] })
  counter.inc(2)
  const sent = []
  const handlers = new Map()
  const reporter = startMetricsReporter({
    client: { notify: (op, data) => sent.push({ op, data }), on: (op, fn) => handlers.set(op, fn) },
    registries: () => [registry],
    pushIntervalMs: 20
  })
  try {
    handlers.get(OP.COLLECT)({ seq: 5 })
    await waitUntil(() => sent.some((m) => m.data.seq === 5))
    const answer = sent.find((m) => m.data.seq === 5)
    assert.strictEqual(answer.op, OP.REPORT)
    assert.strictEqual(answer.data.metrics[0].values[0].value, 2)
    await waitUntil(() => sent.some((m) => m.data.seq === 0))
  } finally {
    reporter.stop()
  }
})

test('the reporter finds the default registry of the prom-client the app loaded, and answers empty without one', async () => {
  assert.ok(findRegistries(undefined).includes(client.register))
  const sent = []
  const handlers = new Map()
  const reporter = startMetricsReporter({
    client: { notify: (op, data) => sent.push({ op, data }), on: (op, fn) => handlers.set(op, fn) },
    registries: () => [],
    pushIntervalMs: 60000
  })
  try {
    await reporter.push()
    assert.deepStrictEqual(sent, [])
    handlers.get(OP.COLLECT)({ seq: 3 })
    await waitUntil(() => sent.length === 1)
    assert.deepStrictEqual(sent[0].data, { seq: 3, metrics: [] })
  } finally {
    reporter.stop()
  }
})

test('an app collect() that throws does not crash the reporter; a scrape still gets an answer', async () => {
  const registry = new client.Registry()
  new client.Gauge({ name: 'boom', help: 'b', registers: [registry], collect () { throw new Error('app bug') } })
  const sent = []
  const handlers = new Map()
  const reporter = startMetricsReporter({
    client: { notify: (op, data) => sent.push({ op, data }), on: (op, fn) => handlers.set(op, fn) },
    registries: [registry],
    pushIntervalMs: 60000
  })
  try {
    await reporter.push()
    handlers.get(OP.COLLECT)({ seq: 9 })
    await waitUntil(() => sent.length === 1)
    assert.deepStrictEqual(sent[0].data, { seq: 9, metrics: [] })
  } finally {
    reporter.stop()
  }
})

async function waitUntil (predicate) {
  for (let i = 0; i < 500 && !predicate(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  assert.ok(predicate(), 'condition not met')
}
