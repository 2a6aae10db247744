'use strict'

/**
 * What a worker reports is data from another process: the primary keeps
 * only well-formed metrics (prom-client's getMetricsAsJSON() shape), so a
 * malformed report cannot make prom-client's aggregation throw and fail
 * every scrape.
 */

const debug = require('debug')('clusterize:metrics')

/** prom-client's own aggregators (AggregatorRegistry.aggregate throws on any other name). */
const AGGREGATORS = new Set(['sum', 'first', 'omit', 'average', 'min', 'max'])
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary'])
/** clusterize's own metrics share the scrape; an app metric under that prefix would clash with them. */
const RESERVED_PREFIX = 'clusterize_'
const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/

/**
 * @param {*} metrics a worker's report: an array of metric objects
 * @returns {object[]} the well-formed metrics, as fresh plain objects
 */
function cleanSnapshot (metrics) {
  if (!Array.isArray(metrics)) return []
  const clean = []
  for (const metric of metrics) {
    const kept = cleanMetric(metric)
    if (kept) clean.push(kept)
    else debug('dropped a malformed metric %o', metric && metric.name)
  }
  return clean
}

function cleanMetric (metric) {
  if (!metric || typeof metric !== 'object') return null
  const { name, type } = metric
  if (typeof name !== 'string' || !NAME.test(name) || name.startsWith(RESERVED_PREFIX)) return null
  if (!TYPES.has(type) || !Array.isArray(metric.values)) return null
  const aggregator = metric.aggregator === undefined ? 'sum' : metric.aggregator
  if (!AGGREGATORS.has(aggregator)) return null
  const values = []
  for (const value of metric.values) {
    if (!value || typeof value !== 'object' || typeof value.value !== 'number') continue
    const labels = cleanLabels(value.labels)
    if (!labels) continue
    const entry = { value: value.value, labels }
    if (typeof value.metricName === 'string' && NAME.test(value.metricName)) entry.metricName = value.metricName
    values.push(entry)
  }
  return { name, help: typeof metric.help === 'string' ? metric.help : name, type, aggregator, values }
}

function cleanLabels (labels) {
  if (labels === undefined || labels === null) return {}
  if (typeof labels !== 'object' || Array.isArray(labels)) return null
  const clean = {}
  for (const key of Object.keys(labels)) {
    const value = labels[key]
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') clean[key] = value
    else return null
  }
  return clean
}

/**
 * The key prom-client aggregates a value under: its series name (a
 * histogram's _bucket, _sum, _count) and its label set, whatever the order
 * of the labels.
 * @param {{ metricName?: string, labels: object }} value
 * @returns {string}
 */
function seriesKey (value) {
  const names = Object.keys(value.labels).sort()
  let key = value.metricName || ''
  for (const name of names) key += '\u0000' + name + '\u0001' + value.labels[name]
  return key
}

module.exports = { cleanSnapshot, seriesKey, AGGREGATORS, RESERVED_PREFIX }
