'use strict'

/**
 * What a worker reports is data from another process: every metric and
 * value is checked where it is used (aggregation, retained totals), so a
 * malformed report is skipped piece by piece instead of failing the scrape,
 * and a well-formed one is never copied.
 */

/** prom-client's aggregators (AggregatorRegistry.aggregate knows no other). */
const AGGREGATORS = new Set(['sum', 'first', 'omit', 'average', 'min', 'max'])
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary'])
/** clusterize's own metrics share the scrape; an app metric under that prefix would clash with them. */
const RESERVED_PREFIX = 'clusterize_'
const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/

/**
 * Names already found valid: the same few names come in every value of
 * every report, and a regular expression per value is most of a scrape's
 * checking. Bounded, so a report full of distinct names cannot grow it.
 */
const KNOWN_MAX = 10000
const knownSeriesNames = new Set()
const knownLabelNames = new Set()

function known (set, pattern, name) {
  if (set.has(name)) return true
  if (!pattern.test(name)) return false
  if (set.size < KNOWN_MAX) set.add(name)
  return true
}

/**
 * A metric of getMetricsAsJSON()'s shape that may be aggregated.
 * @param {*} metric
 * @returns {boolean}
 */
function isMetric (metric) {
  return metric !== null && typeof metric === 'object' &&
    typeof metric.name === 'string' && NAME.test(metric.name) && !metric.name.startsWith(RESERVED_PREFIX) &&
    TYPES.has(metric.type) && Array.isArray(metric.values) &&
    (metric.aggregator === undefined || AGGREGATORS.has(metric.aggregator))
}

/** @returns {string} the metric's aggregator, prom-client's default 'sum' when it names none */
function aggregatorOf (metric) {
  return metric.aggregator === undefined ? 'sum' : metric.aggregator
}

/**
 * The key prom-client aggregates a value under, its series name (a
 * histogram's _bucket, _sum, _count) and its label set whatever the order
 * of the labels; null for a malformed value, which is skipped.
 * @param {*} value
 * @returns {string|null}
 */
function seriesKey (value) {
  if (value === null || typeof value !== 'object' || typeof value.value !== 'number') return null
  // A value object's name and labels do not change once built; with values reports
  // (./values.js) the same objects come back scrape after scrape, so their key is kept.
  let key = keyOf.get(value)
  if (key === undefined) {
    key = labelKey(value)
    keyOf.set(value, key)
  }
  return key
}

/** @type {WeakMap<object, string|null>} */
const keyOf = new WeakMap()

function labelKey (value) {
  let key
  if (value.metricName === undefined) key = ''
  else if (typeof value.metricName === 'string' && known(knownSeriesNames, NAME, value.metricName)) key = value.metricName
  else return null
  const labels = value.labels
  if (labels === undefined || labels === null) return key
  if (typeof labels !== 'object' || Array.isArray(labels)) return null
  const names = Object.keys(labels)
  if (names.length > 1) names.sort()
  for (const name of names) {
    const label = labels[name]
    const kind = typeof label
    if ((kind !== 'string' && kind !== 'number' && kind !== 'boolean') || !known(knownLabelNames, LABEL_NAME, name)) return null
    key += '\u0000' + name + '\u0001' + label
  }
  return key
}

module.exports = { isMetric, aggregatorOf, seriesKey, AGGREGATORS, RESERVED_PREFIX }
