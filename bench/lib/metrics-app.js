'use strict'

/**
 * The server side of bench/metrics.js: 2 workers whose app registers 50
 * prom-client metrics in the default registry (40 counters and 5 gauges
 * with 5 label values each, 5 histograms with 3 label values each and
 * prom-client's default buckets), filled with values. Prints
 * `READY <app port> <metrics port>` once /metrics can be scraped.
 *
 *   node bench/lib/metrics-app.js clusterize   the probes server's /metrics (app + clusterize's own metrics)
 *   node bench/lib/metrics-app.js clusterize-own   the same with `metrics: false`: clusterize's own metrics only
 *   node bench/lib/metrics-app.js anchor       raw node:cluster, prom-client's AggregatorRegistry in the primary
 */

const cluster = require('cluster')
const http = require('http')

const MODE = process.argv[2]
const WORKERS = 2
const LABELS = ['a', 'b', 'c', 'd', 'e']

function registerMetrics () {
  const client = require('prom-client')
  for (let i = 0; i < 40; i++) {
    const counter = new client.Counter({ name: `bench_counter_${i}_total`, help: `counter ${i}`, labelNames: ['kind'] })
    for (const kind of LABELS) counter.inc({ kind }, i + 1)
  }
  for (let i = 0; i < 5; i++) {
    const gauge = new client.Gauge({ name: `bench_gauge_${i}`, help: `gauge ${i}`, labelNames: ['kind'] })
    for (const kind of LABELS) gauge.set({ kind }, i)
  }
  for (let i = 0; i < 5; i++) {
    const histogram = new client.Histogram({ name: `bench_histogram_${i}_seconds`, help: `histogram ${i}`, labelNames: ['route'] })
    for (const route of LABELS.slice(0, 3)) {
      for (let j = 0; j < 20; j++) histogram.observe({ route }, j / 10)
    }
  }
}

function createApp () {
  registerMetrics()
  return http.createServer((req, res) => res.end('ok'))
}

if (MODE === 'clusterize' || MODE === 'clusterize-own') {
  const { clusterize } = require('../..')
  // clusterize-own: the same cluster with app metrics off, what clusterize's own metrics cost.
  const handle = clusterize(createApp, { workers: WORKERS, port: 0, host: '127.0.0.1', probes: { port: 0 }, metrics: MODE === 'clusterize' ? {} : false, logger: false, banner: false })
  if (cluster.isPrimary) {
    handle.ready.then((info) => console.log(`READY ${info.port} ${info.probesPort}`), (err) => {
      console.error(err)
      process.exit(1)
    })
  }
} else if (MODE === 'anchor') {
  const { AggregatorRegistry } = require('prom-client')
  // As prom-client's own example does, in the primary and in every worker: its constructor adds the IPC listeners.
  const registry = new AggregatorRegistry()
  if (cluster.isPrimary) {
    let ready = 0
    let appPort = 0
    cluster.on('listening', (worker, address) => {
      appPort = address.port
      if (++ready === WORKERS) startMetricsServer()
    })
    for (let i = 0; i < WORKERS; i++) cluster.fork()
    function startMetricsServer () {
      const server = http.createServer((req, res) => {
        registry.clusterMetrics().then((text) => {
          res.writeHead(200, { 'Content-Type': registry.contentType })
          res.end(text)
        }, (err) => {
          res.writeHead(500)
          res.end(err.message)
        })
      })
      server.listen(0, '127.0.0.1', () => console.log(`READY ${appPort} ${server.address().port}`))
    }
  } else {
    // Workers answer the primary's requests from the default registry (prom-client's cluster module, loaded above).
    createApp().listen(0, '127.0.0.1')
  }
} else {
  console.error('usage: node bench/lib/metrics-app.js clusterize|anchor')
  process.exit(2)
}
