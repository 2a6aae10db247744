'use strict'

/**
 * The worker's metrics reporter on the service layer: started once the app
 * is built (its registries exist), with a first report before the worker
 * says it is ready, so the primary's first scrape already asks it; a last
 * report when it has drained, so a reload or recycle loses no count.
 */

const { serviceClient } = require('../../services')
const { startMetricsReporter } = require('./reporter')
const { SERVICE, HOLD_MS } = require('./ops')

/**
 * @param {false|{ registries?: *, pushIntervalMs: number }} options config.metrics
 * @returns {{ push: () => Promise<void>, stop: () => void }|null} null with `metrics: false`
 */
function startWorkerMetrics (options) {
  if (!options) return null
  return startMetricsReporter({
    client: serviceClient(SERVICE, { timeoutMs: HOLD_MS + 10000 }),
    registries: options.registries,
    pushIntervalMs: options.pushIntervalMs
  })
}

/** An app collect() that never settles must not hold up a boot or a drain for more than this. */
const REPORT_BOUND_MS = 1000

/**
 * Report now and wait for it, at most REPORT_BOUND_MS.
 * @param {ReturnType<typeof startWorkerMetrics>} reporter
 * @returns {Promise<void>}
 */
function reportBounded (reporter) {
  if (!reporter) return Promise.resolve()
  return new Promise(function bounded (resolve) {
    const timer = setTimeout(resolve, REPORT_BOUND_MS)
    timer.unref()
    reporter.push().then(function reported () {
      clearTimeout(timer)
      resolve()
    })
  })
}

module.exports = { startWorkerMetrics, reportBounded }
