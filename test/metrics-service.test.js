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
const { aggregateLists, formatExposition } = require('../lib/state/metrics/exposition')
const { renderAggregate, renderWorker } = require('../lib/state/metrics/render')
const { startMetricsReporter, findRegistries } = require('../lib/state/metrics/reporter')
const { valuesIfSameShape, applyValues } = require('../lib/state/metrics/values')
const { parse } = require('./helpers/prometheus')

/** One stand-in worker: its own registry with the app's usual metrics. */
function makeWorker (slot) {
  const registry = new client.Registry()
  const requests = new client.Counter({ name: 'app_requests_total', help: 'requests', labelNames: ['route'], registers: [registry] })
  const latency = new client.Histogram({ name: 'app_latency_seconds', help: 'latency', buckets: [0.1, 1], registers: [registry] })
  const inFlight = new client.Gauge({ name: 'app_in_flight', help: 'in flight', registers: [registry] })
  const version = new client.Gauge({ name: 'app_version', help: 'version', aggregator: 'first', registers: [registry] })
  version.set(7)
  nextPid++
  return { caller: { id: slot, pid: nextPid, generation: 1 }, slot, pid: nextPid, registry, requests, latency, inFlight, blocked: false, held: [], reporter: null, sent: [] }
}
let nextPid = 1000

/**
 * Stand-in workers, each running the real reporter, wired to a real
 * MetricsService through in-process calls in place of the service layer's
 * IPC. A blocked worker receives nothing until it is unblocked.
 */
function makeCluster (count, options) {
  const service = new MetricsService({ timeoutMs: (options && options.timeoutMs) || 200 })
  const reporters = []
  const cluster = {
    service,
    workers: [],
    add (slot) {
      const worker = makeWorker(slot)
      const deliver = (fn) => { if (worker.blocked) worker.held.push(fn); else fn() }
      worker.reporter = startMetricsReporter({
        registries: [worker.registry],
        pushIntervalMs: 60000,
        client: {
          notify: (op, data) => {
            assert.strictEqual(op, OP.REPORT)
            worker.sent.push(data.values !== undefined ? 'values' : data.metrics === null ? 'null' : 'full')
            // A report is the plain data the IPC channel would carry.
            service.report(JSON.parse(JSON.stringify(data)), worker.caller)
            return true
          },
          request: (op, data) => {
            assert.strictEqual(op, OP.NEXT)
            return Promise.resolve(service.next(data, worker.caller)).then((answer) => new Promise((resolve) => deliver(() => resolve(answer))))
          }
        }
      })
      reporters.push(worker.reporter)
      cluster.workers.push(worker)
      return worker
    },
    /** The interval push a worker makes (and the one it makes before it reports ready). */
    push (worker) {
      return worker.reporter.push()
    },
    gone (worker) {
      worker.reporter.stop()
      cluster.workers.splice(cluster.workers.indexOf(worker), 1)
      service.workerExit(worker.caller)
    },
    async scrape () {
      return parse(await renderAggregate(await service.collect()))
    },
    close () {
      for (const reporter of reporters) reporter.stop()
      service.close()
    }
  }
  for (let slot = 1; slot <= count; slot++) cluster.add(slot)
  return cluster
}

/** makeCluster(count), closed after the test, with every worker's registry pushed once. */
async function pushedCluster (t, count) {
  const cluster = makeCluster(count)
  t.after(() => cluster.close())
  for (const worker of cluster.workers) await cluster.push(worker)
  return cluster
}

test('counters and histograms are summed, gauges follow their aggregator, in one scrape', async (t) => {
  const cluster = await pushedCluster(t, 2)
  const [a, b] = cluster.workers
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

test('a scrape reads values counted after the last push: every worker that reported is asked', async (t) => {
  const cluster = await pushedCluster(t, 2)
  for (const worker of cluster.workers) worker.requests.inc({ route: '/' }, 5)
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/"}'), 10)
  for (const worker of cluster.workers) worker.requests.inc({ route: '/' }, 1)
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/"}'), 12)
})

test('a gone worker\'s counters and histograms stay in the totals; its gauges leave', async (t) => {
  const cluster = makeCluster(2)
  t.after(() => cluster.close())
  const [a, b] = cluster.workers
  a.requests.inc({ route: '/' }, 10)
  b.requests.inc({ route: '/' }, 5)
  a.latency.observe(0.5)
  a.inFlight.set(3)
  b.inFlight.set(1)
  for (const worker of [a, b]) await cluster.push(worker)
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/"}'), 15)

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

test('a report that arrives after its worker is gone is not counted twice', async (t) => {
  const cluster = makeCluster(1)
  t.after(() => cluster.close())
  const [a] = cluster.workers
  a.requests.inc({ route: '/' }, 4)
  await cluster.push(a)
  cluster.service.workerExit(a.caller)
  cluster.service.report({ seq: 0, metrics: await a.registry.getMetricsAsJSON() }, a.caller)
  const b = cluster.add(2)
  await cluster.push(b)
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/"}'), 4)
})

test('a worker that does not answer in time: the scrape answers with its last values and names it', async (t) => {
  const cluster = makeCluster(2, { timeoutMs: 100 })
  t.after(() => cluster.close())
  const [a, b] = cluster.workers
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

  // Unblocked, it answers the question it was holding, and the next scrape is whole again.
  b.blocked = false
  for (const fn of b.held.splice(0)) fn()
  const whole = await cluster.scrape()
  assert.strictEqual(whole.get('app_requests_total{route="/"}'), 104)
  assert.ok(![...whole.keys()].some((key) => key.startsWith('clusterize_app_metrics_missing{')))
})

test('a worker that exits while a scrape waits for it: the scrape ends at once, its last values retained', async (t) => {
  // A bound no test would wait out: the scrape must end because the worker is gone, not by timing out.
  const cluster = makeCluster(2, { timeoutMs: 600000 })
  t.after(() => cluster.close())
  const [a, b] = cluster.workers
  a.requests.inc({ route: '/' }, 2)
  b.requests.inc({ route: '/' }, 3)
  for (const worker of [a, b]) await cluster.push(worker)
  b.blocked = true
  const scraping = cluster.scrape()
  cluster.gone(b)
  const series = await scraping
  assert.strictEqual(series.get('app_requests_total{route="/"}'), 5)
  assert.ok(![...series.keys()].some((key) => key.startsWith('clusterize_app_metrics_missing{')))
})

test('a scrape that starts while a worker is between questions still reaches it', async (t) => {
  const cluster = makeCluster(1)
  t.after(() => cluster.close())
  const [a] = cluster.workers
  await cluster.push(a)
  // The worker's question is answered "ask again" and it has not asked yet.
  cluster.service.release(a.pid, 0)
  a.requests.inc({ route: '/' }, 3)
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/"}'), 3)
})

test('concurrent scrapes share one round of questions to the workers', async (t) => {
  const cluster = await pushedCluster(t, 2)
  const before = cluster.service.seq
  const results = await Promise.all([cluster.service.collect(), cluster.service.collect(), cluster.service.collect()])
  assert.strictEqual(cluster.service.seq, before + 1)
  for (const result of results) assert.strictEqual(result.workers.length, 2)
})

test('workers that never reported (no prom-client) are not asked and the scrape has no app lines', async (t) => {
  const cluster = makeCluster(2)
  t.after(() => cluster.close())
  const collection = await cluster.service.collect()
  assert.deepStrictEqual(collection.workers, [])
  assert.strictEqual(cluster.service.waiting.size, 0)
  assert.strictEqual(await renderAggregate(collection), '')
})

test('malformed reports are dropped, never passed to prom-client', async (t) => {
  const service = new MetricsService({ timeoutMs: 20 })
  t.after(() => service.close())
  const caller = { id: 1, pid: 77, generation: 1 }
  service.report({
    seq: 0,
    metrics: [
      { name: 'ok_total', help: 'ok', type: 'counter', values: [{ value: 1, labels: {} }] },
      { name: 'bad name', type: 'gauge', values: [] },
      { name: 'x', type: 'gauge', aggregator: 'nope', values: [] },
      { name: 'clusterize_requests_total', type: 'counter', values: [{ value: 9, labels: {} }] },
      { name: 'y', type: 'weird', values: [] },
      null,
      'text',
      { name: 'z', type: 'counter', values: [{ value: 'NaN' }, { value: 2, labels: { a: {} } }, { value: 3, labels: { a: 'b' } }] }
    ]
  }, caller)
  service.report({ seq: 0, metrics: 'not an array' }, { id: 2, pid: 78, generation: 1 })
  service.report(null, caller)
  service.report({ seq: 0, metrics: [] }, undefined)
  // Nobody answers: the worker is named missing, its last (cleaned) report counts.
  const series = parse(await renderAggregate(await service.collect()))
  assert.strictEqual(series.get('ok_total'), 1)
  assert.strictEqual(series.get('z{a="b"}'), 3)
  assert.strictEqual(series.get('clusterize_requests_total'), undefined)
  assert.strictEqual(series.get('x'), undefined)
  assert.strictEqual(series.get('clusterize_app_metrics_missing{worker="1",pid="77"}'), 1)
})

test('the aggregated text is what prom-client\'s AggregatorRegistry.aggregate() writes, for every aggregator and awkward labels', async () => {
  const lists = []
  for (let worker = 0; worker < 3; worker++) {
    const registry = new client.Registry()
    const counter = new client.Counter({ name: 'c_total', help: 'a "counter"\nwith \\ a second line', labelNames: ['path', 'code'], registers: [registry] })
    counter.inc({ path: '/a"b\\c\nd', code: 200 }, worker + 1)
    counter.inc({ code: 500, path: '/x' }, 2)
    if (worker === 1) counter.inc({ path: '/only-one', code: 404 })
    const histogram = new client.Histogram({ name: 'h_seconds', help: 'h', labelNames: ['m'], buckets: [0.01, 0.1, 1, 10], registers: [registry] })
    histogram.observe({ m: 'GET' }, worker / 10)
    histogram.observe({ m: 'POST' }, 5 + worker)
    const summary = new client.Summary({ name: 's', help: 's', percentiles: [0.5, 0.9], registers: [registry] })
    summary.observe(worker)
    for (const aggregator of ['sum', 'first', 'min', 'max', 'average', 'omit']) {
      new client.Gauge({ name: `g_${aggregator}`, help: aggregator, aggregator, registers: [registry] }).set(worker * 3 + 1)
    }
    new client.Gauge({ name: 'g_inf', help: 'inf', registers: [registry] }).set(worker === 2 ? Infinity : 1)
    new client.Gauge({ name: 'g_unset', help: 'no value yet', labelNames: ['x'], registers: [registry] })
    // Through JSON, as the IPC channel carries it.
    lists.push(JSON.parse(JSON.stringify(await registry.getMetricsAsJSON())))
  }
  // JSON turns Infinity into null: restore it to compare prom-client's formatting of it too.
  for (const list of lists) for (const metric of list) for (const value of metric.values) if (value.value === null) value.value = Infinity
  const ours = formatExposition(aggregateLists(lists))
  const theirs = await client.AggregatorRegistry.aggregate(lists).metrics()
  assert.strictEqual(ours, theirs)
  assert.strictEqual(formatExposition(aggregateLists([])), '')
})

test('retained totals: label order does not split a series; gauges and non-sum counters are not kept', () => {
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

test('the per-worker view shows one worker\'s own values', async (t) => {
  const cluster = makeCluster(2)
  t.after(() => cluster.close())
  const [a, b] = cluster.workers
  a.requests.inc({ route: '/' }, 3)
  b.requests.inc({ route: '/' }, 4)
  for (const worker of [a, b]) await cluster.push(worker)
  const collection = await cluster.service.collect()
  const view = parse(await renderWorker(collection.workers.find((w) => w.slot === b.slot)))
  assert.strictEqual(view.get('app_requests_total{route="/"}'), 4)
})

test('the reporter pushes on its interval, from the registries it is given', async (t) => {
  const registry = new client.Registry()
  new client.Counter({ name: 'r_total', help: 'r', registers: [registry] }).inc(2)
  const sent = []
  const reporter = startMetricsReporter({
    client: { notify: (op, data) => sent.push({ op, data }), request: () => new Promise(() => {}) },
    registries: () => [registry],
    pushIntervalMs: 20
  })
  t.after(() => reporter.stop())
  await waitUntil(() => sent.length >= 2)
  assert.strictEqual(sent[0].op, OP.REPORT)
  assert.strictEqual(sent[0].data.seq, 0)
  assert.strictEqual(sent[0].data.metrics[0].values[0].value, 2)
})

test('the reporter finds the default registry of the prom-client the app loaded; without one it sends nothing', async (t) => {
  assert.ok(findRegistries(undefined).includes(client.register))
  const sent = []
  const reporter = startMetricsReporter({
    client: { notify: (op, data) => sent.push({ op, data }), request: () => assert.fail('a worker without metrics waits for no scrape') },
    registries: () => [],
    pushIntervalMs: 60000
  })
  t.after(() => reporter.stop())
  await reporter.push()
  assert.deepStrictEqual(sent, [])
})

test('an app collect() that throws does not crash the reporter; a scrape still gets an answer (null: keep my last values)', async (t) => {
  const registry = new client.Registry()
  let broken = false
  new client.Gauge({ name: 'boom', help: 'b', registers: [registry], collect () { if (broken) throw new Error('app bug') } })
  const sent = []
  let ask
  const reporter = startMetricsReporter({
    client: { notify: (op, data) => sent.push({ op, data }), request: () => new Promise((resolve) => { ask = resolve }) },
    registries: [registry],
    pushIntervalMs: 60000
  })
  t.after(() => reporter.stop())
  await reporter.push()
  broken = true
  await reporter.push()
  assert.strictEqual(sent.length, 1)
  ask({ seq: 9 })
  await waitUntil(() => sent.length === 2)
  assert.deepStrictEqual(sent[1].data, { seq: 9, metrics: null })
})

test('the reporter keeps asking after a failed question, never in a tight loop', async (t) => {
  const registry = new client.Registry()
  new client.Counter({ name: 'q_total', help: 'q', registers: [registry] })
  let questions = 0
  const reporter = startMetricsReporter({
    client: { notify: () => true, request: () => { questions++; return Promise.reject(new Error('no primary')) } },
    registries: [registry],
    pushIntervalMs: 60000
  })
  t.after(() => reporter.stop())
  await reporter.push()
  await new Promise((resolve) => setImmediate(resolve))
  await new Promise((resolve) => setImmediate(resolve))
  assert.strictEqual(questions, 1, 'a failed question waits pushIntervalMs before the next')
})

async function waitUntil (predicate) {
  for (let i = 0; i < 500 && !predicate(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  assert.ok(predicate(), 'condition not met')
}

test('concurrent scrapes of /metrics share one rendering', async (t) => {
  const { createAppMetrics } = require('../lib/state/metrics')
  const app = createAppMetrics({ timeoutMs: 50 })
  t.after(() => app.service.close())
  app.service.report({ seq: 0, metrics: [{ name: 'x_total', help: 'x', type: 'counter', values: [{ value: 1, labels: {} }] }] }, { id: 1, pid: 1, generation: 1 })
  const [a, b] = [app.render(), app.render()]
  assert.strictEqual(a, b)
  assert.match(await a, /^x_total 1$/m)
  // Once answered, the next scrape asks again.
  const before = app.service.seq
  await app.render()
  assert.strictEqual(app.service.seq, before + 1)
})

test('a worker that cannot read its registries when asked: its last values stand, it is named, the scrape does not wait', async (t) => {
  // A bound no test would wait out: the scrape ends because the worker answered.
  const service = new MetricsService({ timeoutMs: 600000 })
  t.after(() => service.close())
  const caller = { id: 1, pid: 5, generation: 1 }
  service.report({ seq: 0, metrics: [{ name: 'x_total', help: 'x', type: 'counter', values: [{ value: 7, labels: {} }] }] }, caller)
  const asking = service.next(null, caller)
  const scraping = service.collect()
  const { seq } = await asking
  service.report({ seq, metrics: null }, caller)
  const series = parse(renderAggregate(await scraping))
  assert.strictEqual(series.get('x_total'), 7)
  assert.strictEqual(series.get('clusterize_app_metrics_missing{worker="1",pid="5"}'), 1)
})

test('a gone pid\'s late reports are ignored for a while; later the pid may be a new worker\'s', async (t) => {
  let now = 1000
  const service = new MetricsService({ timeoutMs: 20, now: () => now })
  t.after(() => service.close())
  const caller = { id: 1, pid: 9, generation: 1 }
  const report = (value) => service.report({ seq: 0, metrics: [{ name: 'x_total', help: 'x', type: 'counter', values: [{ value, labels: {} }] }] }, caller)
  report(3)
  service.workerExit(caller)
  report(3)
  assert.deepStrictEqual(await service.next(null, caller), { seq: 0 })
  assert.strictEqual(parse(renderAggregate(await service.collect())).get('x_total'), 3)
  now += 3600000
  report(4)
  assert.strictEqual(parse(renderAggregate(await service.collect())).get('x_total'), 7)
})

test('the per-worker view of a slot shows its newest worker (during a reload both report)', async (t) => {
  const { createAppMetrics } = require('../lib/state/metrics')
  const app = createAppMetrics({ timeoutMs: 20 })
  t.after(() => app.service.close())
  const metric = (value) => [{ name: 'x_total', help: 'x', type: 'counter', values: [{ value, labels: {} }] }]
  app.service.report({ seq: 0, metrics: metric(5) }, { id: 0, pid: 100, generation: 1 })
  app.service.report({ seq: 0, metrics: metric(1) }, { id: 0, pid: 200, generation: 2 })
  assert.match(await app.renderWorker(0), /generation 2[\s\S]*^x_total 1$/m)
  await assert.rejects(app.renderWorker(3), (err) => err.status === 404 && /try one of 0/.test(err.message))
})

test('after a full report, scrapes carry numbers only; a new series or label set sends a full report again; sums stay right', async (t) => {
  const cluster = await pushedCluster(t, 2)
  const [a, b] = cluster.workers
  a.requests.inc({ route: '/x' }, 3)
  b.requests.inc({ route: '/x' }, 4)
  // The first scrape after the push: the new series /x changed the shape.
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/x"}'), 7)
  const before = a.sent.length
  a.requests.inc({ route: '/x' }, 10)
  a.latency.observe(0.5)
  let series = await cluster.scrape()
  assert.deepStrictEqual(a.sent.slice(before), ['values'], 'same series: numbers only')
  assert.strictEqual(series.get('app_requests_total{route="/x"}'), 17)
  assert.strictEqual(series.get('app_latency_seconds_bucket{le="1"}'), 1)
  assert.strictEqual(series.get('app_latency_seconds_count'), 1)
  // A label set the primary has not seen: a full report, the new series counted.
  a.requests.inc({ route: '/z' }, 2)
  series = await cluster.scrape()
  assert.strictEqual(a.sent[a.sent.length - 1], 'full')
  assert.strictEqual(series.get('app_requests_total{route="/z"}'), 2)
  assert.strictEqual(series.get('app_requests_total{route="/x"}'), 17)
  // A worker that exits after values reports: its last numbers are what is retained.
  b.requests.inc({ route: '/x' }, 1)
  await cluster.scrape()
  assert.strictEqual(b.sent[b.sent.length - 1], 'values')
  cluster.gone(b)
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/x"}'), 18)
})

test('a values report the primary cannot place (it holds no full report: a new primary) is refused; the worker is asked for a full one', async (t) => {
  const cluster = makeCluster(1)
  t.after(() => cluster.close())
  const [a] = cluster.workers
  await cluster.push(a)
  a.requests.inc({ route: '/x' }, 3)
  await cluster.scrape()
  // The primary forgets this worker's report, as a new primary would not have it.
  cluster.service.reports.get(a.pid).shape = 99
  a.requests.inc({ route: '/x' }, 1)
  await cluster.push(a)
  assert.strictEqual(a.sent[a.sent.length - 1], 'values')
  await waitUntil(() => a.sent[a.sent.length - 1] === 'full')
  assert.strictEqual((await cluster.scrape()).get('app_requests_total{route="/x"}'), 4)
  assert.strictEqual(a.sent[a.sent.length - 1], 'values', 'numbers only again once the primary holds the full report')
})

test('values reports: never to a primary that did not offer them, nor in the same process, where the report is the app\'s own objects', async (t) => {
  const registry = new client.Registry()
  const counter = new client.Counter({ name: 'v_total', help: 'v', registers: [registry] })
  const sent = []
  let ask
  const reporter = startMetricsReporter({
    client: { notify: (op, data) => sent.push(data), request: () => new Promise((resolve) => { ask = resolve }) },
    registries: [registry],
    pushIntervalMs: 60000
  })
  t.after(() => reporter.stop())
  await reporter.push()
  // An older primary's question has no `values`: full reports only.
  ask({ seq: 1 })
  await waitUntil(() => sent.length === 2)
  assert.ok(Array.isArray(sent[1].metrics) && sent[1].values === undefined)
  counter.inc()
  ask({ seq: 2, values: true })
  await waitUntil(() => sent.length === 3)
  assert.deepStrictEqual(sent[2], { seq: 2, shape: sent[1].shape, values: [1] })
  // The service offers values to other processes only.
  const service = new MetricsService({ timeoutMs: 100 })
  t.after(() => service.close())
  service.report({ seq: 0, shape: 1, metrics: [] }, { id: 1, pid: 4242, generation: 1 })
  service.report({ seq: 0, shape: 1, metrics: [] }, { id: 0, pid: process.pid, generation: 1 })
  const remote = service.next(null, { id: 1, pid: 4242, generation: 1 })
  const local = service.next(null, { id: 0, pid: process.pid, generation: 1 })
  service.collect()
  assert.deepStrictEqual(await remote, { seq: service.seq, values: true })
  assert.deepStrictEqual(await local, { seq: service.seq, values: false })
})

test('valuesIfSameShape and applyValues: label content, not objects, decides; counts must match', () => {
  const one = [{ name: 'm', help: 'h', type: 'counter', values: [{ value: 1, labels: { a: 'x' } }, { value: 2, labels: { a: 'y' } }] }]
  const same = [{ name: 'm', help: 'h', type: 'counter', values: [{ value: 5, labels: { a: 'x' } }, { value: 6, labels: { a: 'y' } }] }]
  assert.deepStrictEqual(valuesIfSameShape(one, same), [5, 6])
  const reordered = [{ name: 'm', help: 'h', type: 'counter', values: [{ value: 6, labels: { a: 'y' } }, { value: 5, labels: { a: 'x' } }] }]
  assert.strictEqual(valuesIfSameShape(one, reordered), null)
  const moreLabels = [{ name: 'm', help: 'h', type: 'counter', values: [{ value: 5, labels: { a: 'x', b: 'z' } }, { value: 6, labels: { a: 'y' } }] }]
  assert.strictEqual(valuesIfSameShape(one, moreLabels), null)
  assert.strictEqual(valuesIfSameShape(one, [{ ...same[0], help: 'other' }]), null)
  const held = JSON.parse(JSON.stringify(one))
  assert.strictEqual(applyValues(held, [7]), false, 'a count that does not fit writes nothing')
  assert.deepStrictEqual(held[0].values.map((v) => v.value), [1, 2])
  assert.strictEqual(applyValues(held, [7, 8]), true)
  assert.deepStrictEqual(held[0].values.map((v) => v.value), [7, 8])
  assert.strictEqual(applyValues([{ name: 'broken' }], []), false)
})
