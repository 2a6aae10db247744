'use strict'

/**
 * Reports of values only. Between two reads of a worker's registries the
 * metrics, their label sets and their order rarely change; only the numbers
 * do. Once the primary holds a full report, the worker sends just the
 * numbers, in the order of that report's values, and the primary writes
 * them into the report it holds. A scrape then moves a few kilobytes of
 * numbers instead of every metric's help and labels, and the primary keeps
 * its per-series work (./snapshot.js keys, label text) from one scrape to
 * the next, since the value objects stay the same.
 *
 * The worker compares label sets by content (prom-client builds new objects
 * on each read); any difference sends a full report. The primary checks the
 * count and refuses a values report that does not fit what it holds, which
 * makes the worker send a full one.
 */

/**
 * The numbers of `next` in order, when it has the shape of `prev`, else null.
 * @param {object[]} prev the metrics of the last full report
 * @param {object[]} next the metrics read now
 * @returns {Array<number|null>|null}
 */
function valuesIfSameShape (prev, next) {
  if (prev.length !== next.length) return null
  const out = []
  for (let i = 0; i < next.length; i++) {
    const a = prev[i]
    const b = next[i]
    if (a.name !== b.name || a.type !== b.type || a.help !== b.help || a.aggregator !== b.aggregator) return null
    const before = a.values
    const now = b.values
    if (!Array.isArray(now) || before.length !== now.length) return null
    for (let j = 0; j < now.length; j++) {
      const x = before[j]
      const y = now[j]
      if (x.metricName !== y.metricName || !sameLabels(x.labels, y.labels)) return null
      out.push(y.value)
    }
  }
  return out
}

function sameLabels (a, b) {
  if (a === b) return true
  if (a === undefined || b === undefined || a === null || b === null) return false
  let count = 0
  for (const name in a) {
    if (a[name] !== b[name]) return false
    count++
  }
  for (const name in b) count--
  return count === 0
}

/**
 * Write a values report into the full report it follows; false (nothing
 * written) when the counts differ or the held report is not of that shape.
 * @param {object[]} metrics the held full report
 * @param {*} values
 * @returns {boolean}
 */
function applyValues (metrics, values) {
  if (!Array.isArray(values)) return false
  let total = 0
  for (const metric of metrics) {
    if (metric === null || typeof metric !== 'object' || !Array.isArray(metric.values)) return false
    total += metric.values.length
  }
  if (total !== values.length) return false
  let k = 0
  for (const metric of metrics) {
    for (const value of metric.values) {
      const number = values[k++]
      if (value !== null && typeof value === 'object') value.value = number
    }
  }
  return true
}

module.exports = { valuesIfSameShape, applyValues }
