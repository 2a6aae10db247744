'use strict'

/**
 * Turns a MetricsService collection into Prometheus text: the app's
 * metrics summed across workers by prom-client's rules (./exposition.js),
 * the retained totals of gone workers added in, and a few lines saying
 * whose values are not fresh.
 */

const { aggregateLists, formatExposition } = require('./exposition')

/**
 * @param {ReturnType<import('./service').MetricsService['result']>} collection
 * @returns {string} '' when no worker has app metrics
 */
function renderAggregate (collection) {
  const lists = collection.workers.map((worker) => worker.metrics)
  // Last: a metric takes its help and aggregator from the first list that has it, a live worker's.
  if (collection.retained.length > 0) lists.push(collection.retained)
  if (lists.length === 0) return ''
  return formatExposition(aggregateLists(lists)) + statusLines(collection)
}

/**
 * One worker's own values, labels as the app set them, for debugging.
 * @param {object} worker an entry of collection.workers
 * @returns {string}
 */
function renderWorker (worker) {
  return `# clusterize worker ${worker.slot} pid ${worker.pid} generation ${worker.generation}: ${worker.answered ? 'fresh' : `did not answer in time, values ${seconds(worker.ageMs)} s old`}\n` +
    formatExposition(aggregateLists([worker.metrics]))
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
