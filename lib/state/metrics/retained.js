'use strict'

/**
 * The last counter and histogram values of workers that are gone (exit,
 * crash, recycle, reload), kept by the primary and added to every scrape.
 * Without them a replaced worker's counts vanish from the sum and
 * Prometheus reads the drop as a counter reset (rate() then jumps).
 *
 * Only metrics prom-client sums are kept: counters, histograms and
 * summaries whose aggregator is 'sum'. Of a summary only its `_count` and
 * `_sum` are kept: quantiles cannot be added up (prom-client's sum of them
 * means nothing), so a summary's quantiles are the live workers' alone. A
 * gauge is a current value: a gone worker has none.
 */

const { isMetric, aggregatorOf, seriesKey } = require('./snapshot')

const MONOTONIC = new Set(['counter', 'histogram', 'summary'])

/** The values of a metric that only grow: all of a counter's and histogram's, a summary's _count and _sum. */
function grows (metric, value) {
  if (metric.type !== 'summary') return true
  return typeof value.metricName === 'string' && (value.metricName === metric.name + '_count' || value.metricName === metric.name + '_sum')
}

class RetainedTotals {
  constructor () {
    /** @type {Map<string, { name: string, help: string, type: string, aggregator: string, values: Map<string, object> }>} */
    this.metrics = new Map()
    this.workers = 0
  }

  /**
   * Add a gone worker's last snapshot to the totals.
   * @param {object[]} snapshot its getMetricsAsJSON() array (malformed parts are skipped)
   */
  fold (snapshot) {
    if (this.add(snapshot)) this.workers++
  }

  /**
   * Add these totals, or a gone worker's snapshot, without counting a worker.
   * @param {object[]} snapshot
   * @returns {boolean} whether anything was kept
   */
  add (snapshot) {
    let kept = false
    if (!Array.isArray(snapshot)) return false
    for (const metric of snapshot) {
      if (!isMetric(metric) || !MONOTONIC.has(metric.type) || aggregatorOf(metric) !== 'sum') continue
      let held = this.metrics.get(metric.name)
      // A reload may bring code where the name is another kind of metric: the newest kind wins.
      if (held && held.type !== metric.type) held = null
      if (!held) {
        held = { name: metric.name, help: typeof metric.help === 'string' ? metric.help : metric.name, type: metric.type, aggregator: 'sum', values: new Map() }
        this.metrics.set(metric.name, held)
      }
      for (const value of metric.values) {
        if (!grows(metric, value)) continue
        const key = seriesKey(value)
        if (key === null) continue
        const sum = held.values.get(key)
        if (sum) {
          sum.value += value.value
        } else {
          const entry = { value: value.value, labels: Object.assign({}, value.labels) }
          if (value.metricName !== undefined) entry.metricName = value.metricName
          held.values.set(key, entry)
        }
      }
      kept = true
    }
    return kept
  }

  /** @returns {object[]} the totals in getMetricsAsJSON() shape, one more list to aggregate */
  snapshot () {
    const list = []
    for (const held of this.metrics.values()) {
      list.push({ name: held.name, help: held.help, type: held.type, aggregator: 'sum', values: Array.from(held.values.values()) })
    }
    return list
  }

  get size () {
    return this.metrics.size
  }
}

module.exports = { RetainedTotals }
