'use strict'

/**
 * The app's prom-client metrics on the primary's /metrics, on real clusters:
 * requests over fresh connections, real kill -9, real reloads, a worker
 * whose event loop is held during the scrape, and an app without
 * prom-client that must not get it loaded.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { parse } = require('./helpers/prometheus')

const fixture = path.join(__dirname, 'fixtures/metrics-cluster.js')
after(stopAll)

function env (options, extra) {
  return Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(Object.assign({ workers: 2, probes: { port: 0 } }, options)) }, extra)
}

async function scrape (cluster, query) {
  const res = await cluster.probe('/metrics' + (query || ''))
  assert.strictEqual(res.status, 200, res.body)
  return parse(res.body)
}

/** `n` requests to /count, each on a fresh connection; the pids that answered. */
async function count (cluster, n, value) {
  const pids = new Set()
  for (let i = 0; i < n; i++) {
    const res = await cluster.get(`/count?v=${value === undefined ? 0.2 : value}`)
    assert.strictEqual(res.status, 200)
    pids.add(res.json.pid)
  }
  return pids
}

const COUNTER = 'app_requests_total{route="/count"}'
const N = 20

test('a counter incremented on N requests spread over 2 workers reads N in one scrape; histogram buckets and count sum', async () => {
  const cluster = await startCluster(fixture, { env: env({}) })
  try {
    const pids = await count(cluster, N / 2, 0.05)
    for (const pid of await count(cluster, N / 2, 0.7)) pids.add(pid)
    assert.strictEqual(pids.size, 2, 'both workers served requests')
    const series = await scrape(cluster)
    assert.strictEqual(series.get(COUNTER), N)
    assert.strictEqual(series.get('app_work_seconds_bucket{le="0.1"}'), N / 2)
    assert.strictEqual(series.get('app_work_seconds_bucket{le="0.5"}'), N / 2)
    assert.strictEqual(series.get('app_work_seconds_bucket{le="1"}'), N)
    assert.strictEqual(series.get('app_work_seconds_bucket{le="+Inf"}'), N)
    assert.strictEqual(series.get('app_work_seconds_count'), N)
    assert.ok(Math.abs(series.get('app_work_seconds_sum') - (N / 2) * 0.75) < 1e-9)
    // Gauges by their aggregator (sum by default): one per worker.
    assert.strictEqual(series.get('app_workers_up'), 2)
    // clusterize's own metrics in the same scrape.
    assert.ok(series.has('clusterize_workers{state="ready"}'))

    // The per-worker view: each worker's own count, together N.
    const stats = await cluster.stats()
    let sum = 0
    for (const worker of stats.workers) {
      const own = await scrape(cluster, `?worker=${worker.id}`)
      assert.ok(own.get(COUNTER) > 0, `worker ${worker.id} counted some`)
      sum += own.get(COUNTER)
    }
    assert.strictEqual(sum, N)
    assert.strictEqual((await cluster.probe('/metrics?worker=99')).status, 404)
    assert.strictEqual((await cluster.probe('/metrics?worker=x')).status, 400)
  } finally {
    await cluster.stop()
  }
})

test('after a kill -9 of a worker and after a reload the counter never goes down, and N more requests add N', async () => {
  // A 1 s bake instead of the default 5 s: the scrapes still run through the canary, the drain and the commit.
  const cluster = await startCluster(fixture, { env: env({ reload: { bakeMs: 1000 } }, { CZ_DEFAULT_METRICS: '1' }) })
  const CPU = 'process_cpu_seconds_total'
  try {
    await count(cluster, N)
    const beforeKill = await scrape(cluster)
    assert.strictEqual(beforeKill.get(COUNTER), N)
    assert.ok(beforeKill.get(CPU) > 0, 'the default metrics are reported')

    const victim = (await cluster.stats()).workers[0]
    process.kill(victim.pid, 'SIGKILL')
    await cluster.waitEvent('worker:exit', (data) => data.pid === victim.pid)
    await cluster.waitEvent('worker:ready', (data) => data.id === victim.id && data.pid !== victim.pid)
    const afterKill = await scrape(cluster)
    assert.strictEqual(afterKill.get(COUNTER), N, 'the killed worker\'s counts stay in the total')
    // A summary's _count and _sum are counters too (its quantiles cannot be added up: the live workers' only).
    assert.strictEqual(afterKill.get('app_work_summary_count'), N, 'the killed worker\'s summary count stays in the total')
    assert.ok(Math.abs(afterKill.get('app_work_summary_sum') - N * 0.2) < 1e-9, `summary sum ${afterKill.get('app_work_summary_sum')}`)
    // A float sum, added in another order once a worker's values are retained: equal within rounding.
    assert.ok(afterKill.get(CPU) >= beforeKill.get(CPU) - 1e-9, `${CPU} went down after the kill: ${beforeKill.get(CPU)} -> ${afterKill.get(CPU)}`)
    await count(cluster, N)
    assert.strictEqual((await scrape(cluster)).get(COUNTER), 2 * N)

    // Scrape all through a reload: every value at least the one before.
    let last = 2 * N
    let lastSummary = 2 * N
    let lastCpu = afterKill.get(CPU)
    let scrapes = 0
    let reloading = true
    const watcher = (async () => {
      while (reloading) {
        const series = await scrape(cluster)
        const value = series.get(COUNTER)
        assert.ok(value >= last, `the counter went down during the reload: ${last} -> ${value}`)
        assert.ok(series.get('app_work_summary_count') >= lastSummary, `the summary count went down during the reload: ${lastSummary} -> ${series.get('app_work_summary_count')}`)
        lastSummary = series.get('app_work_summary_count')
        assert.ok(series.get(CPU) >= lastCpu - 1e-9, `${CPU} went down during the reload: ${lastCpu} -> ${series.get(CPU)}`)
        lastCpu = series.get(CPU)
        last = value
        scrapes++
      }
    })()
    const result = await cluster.reload()
    reloading = false
    await watcher
    assert.strictEqual(result.ok, true, JSON.stringify(result))
    assert.ok(scrapes > 0)
    const oldPids = new Set((await cluster.stats()).workers.map((w) => w.pid))
    assert.ok(!oldPids.has(victim.pid))
    assert.strictEqual((await scrape(cluster)).get(COUNTER), 2 * N, 'the reloaded workers\' counts stay in the total')
    await count(cluster, N)
    const series = await scrape(cluster)
    assert.strictEqual(series.get(COUNTER), 3 * N)
    assert.strictEqual(series.get('app_work_seconds_count'), 3 * N)
    assert.strictEqual(series.get('app_work_summary_count'), 3 * N)
    // Gauges of gone workers leave: two live workers.
    assert.strictEqual(series.get('app_workers_up'), 2)
    assert.strictEqual(series.get('clusterize_app_metrics_retained_workers_total'), 3)
  } finally {
    await cluster.stop()
  }
})

test('a reload right after requests, with no scrape between: the drained workers\' last report carries their counts', async () => {
  // No interval push within the test: only the report a worker makes when it has drained can carry the counts.
  const cluster = await startCluster(fixture, { env: env({ metrics: { pushIntervalMs: 600000 }, reload: { bakeMs: 1000 } }) })
  try {
    await count(cluster, N)
    const result = await cluster.reload()
    assert.strictEqual(result.ok, true, JSON.stringify(result))
    assert.strictEqual((await scrape(cluster)).get(COUNTER), N)
  } finally {
    await cluster.stop()
  }
})

test('a worker whose event loop is held during the scrape: the scrape answers with its last values and names it', async () => {
  const cluster = await startCluster(fixture, { env: env({ metrics: { timeoutMs: 300 } }) })
  try {
    await count(cluster, N)
    assert.strictEqual((await scrape(cluster)).get(COUNTER), N)
    const blocked = (await cluster.get('/block?ms=4000')).json
    const series = await scrape(cluster)
    assert.strictEqual(series.get(COUNTER), N, 'its last reported counts are in the total')
    const missing = [...series.keys()].filter((key) => key.startsWith('clusterize_app_metrics_missing{'))
    assert.deepStrictEqual(missing, [`clusterize_app_metrics_missing{worker="${blocked.worker}",pid="${blocked.pid}"}`])
    assert.ok(series.has('clusterize_workers{state="ready"}'), 'clusterize\'s own metrics are there')
    // Once it runs again, it answers.
    await eventually(async () => ![...(await scrape(cluster)).keys()].some((key) => key.startsWith('clusterize_app_metrics_missing{')),
      { timeoutMs: 20000, intervalMs: 200, what: 'the blocked worker answering again' })
  } finally {
    await cluster.stop()
  }
})

test('an app without prom-client: /metrics as before, and no worker loads prom-client', async () => {
  const cluster = await startCluster(fixture, { env: env({}, { CZ_NO_PROM: '1' }) })
  try {
    const res = await cluster.probe('/metrics')
    assert.strictEqual(res.status, 200)
    assert.match(res.body, /clusterize_workers/)
    assert.doesNotMatch(res.body, /clusterize_app_metrics|app_requests_total/)
    const seen = new Set()
    for (let i = 0; i < 40 && seen.size < 2; i++) {
      const loaded = (await cluster.get('/prom-loaded')).json
      assert.strictEqual(loaded.loaded, false, `worker ${loaded.pid} loaded prom-client`)
      seen.add(loaded.pid)
    }
    assert.strictEqual(seen.size, 2)
    assert.strictEqual((await cluster.probe('/metrics?worker=1')).status, 404)
  } finally {
    await cluster.stop()
  }
})

test('metrics: false: /metrics has clusterize\'s own metrics only', async () => {
  const cluster = await startCluster(fixture, { env: env({ metrics: false }) })
  try {
    await count(cluster, 4)
    const res = await cluster.probe('/metrics')
    assert.strictEqual(res.status, 200)
    assert.match(res.body, /clusterize_workers/)
    assert.doesNotMatch(res.body, /app_requests_total/)
  } finally {
    await cluster.stop()
  }
})
