'use strict'

/**
 * Turns a MetricsService collection into Prometheus text: the app's
 * metrics summed across workers by prom-client's own rules
 * (AggregatorRegistry.aggregate: counters and histograms summed, gauges by
 * their `aggregator`), the retained totals of gone workers added in, and a
 * few lines saying whose values are not fresh. prom-client is loaded here,
 * on the first scrape that has app metrics.
 */

/**
 * @param {ReturnType<import('./service').MetricsService['result']>} collection
 * @returns {Promise<string>} '' when no worker has app metrics
 */
async function renderAggregate (collection) {
  const lists = collection.workers.map((worker) => worker.metrics)
  // Last: prom-client takes a metric's help and aggregator from the first list that has it, a live worker's.
  if (collection.retained.length > 0) lists.push(collection.retained)
  if (lists.length === 0) return ''
  const { AggregatorRegistry } = require('prom-client')
  const text = await AggregatorRegistry.aggregate(lists).metrics()
  return text + statusLines(collection)
}

/**
 * One worker's own values, labels as the app set them, for debugging.
 * @param {object} worker an entry of collection.workers
 * @returns {Promise<string>}
 */
async function renderWorker (worker) {
  const { AggregatorRegistry } = require('prom-client')
  const text = await AggregatorRegistry.aggregate([worker.metrics]).metrics()
  return `# clusterize worker ${worker.slot} pid ${worker.pid} generation ${worker.generation}: ${worker.answered ? 'fresh' : `not answered in time, values ${seconds(worker.ageMs)} s old`}\n` + text
}

function statusLines (collection) {
  const missing = collection.workers.filter((worker) => !worker.answered)
  let out = '# HELP clusterize_app_metrics_missing A worker that did not answer this scrape in time (metrics.timeoutMs): its last reported values are in the totals\n' +
    '# TYPE clusterize_app_metrics_missing gauge\n'
  for (const worker of missing) out += `clusterize_app_metrics_missing{worker="${worker.slot}",pid="${worker.pid}"} 1\n`
  out += '# HELP clusterize_app_metrics_age_seconds How old the values counted for each worker are\n' +
    '# TYPE clusterize_app_metrics_age_seconds gauge\n'
  for (const worker of collection.workers) out += `clusterize_app_metrics_age_seconds{worker="${worker.slot}",pid="${worker.pid}"} ${seconds(worker.ageMs)}\n`
  out += '# HELP clusterize_app_metrics_retained_workers_total Gone workers whose last counters and histograms stay in the totals\n' +
    '# TYPE clusterize_app_metrics_retained_workers_total counter\n' +
    `clusterize_app_metrics_retained_workers_total ${collection.retainedWorkers}\n`
  return out
}

function seconds (ms) {
  return Math.round(ms) / 1000
}

module.exports = { renderAggregate, renderWorker }
