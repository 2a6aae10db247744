'use strict'

/** Markdown tables, medians, ratios and number formatting for the benches. */

function median (values) {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b)
  if (sorted.length === 0) return NaN
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/** "1.02x" (value / baseline), or "n/a". */
function ratio (value, baseline) {
  if (!Number.isFinite(value) || !Number.isFinite(baseline) || baseline === 0) return 'n/a'
  return times(value / baseline)
}

/**
 * The median over rounds of value(a row's round) / value(the anchor's round in the same pass):
 * rounds measured side by side, so a swing of the box's speed between passes cancels out.
 */
function sameRoundMedian (rounds, anchorRounds, value) {
  return median(rounds.map((round, i) => value(round) / value(anchorRounds[i])))
}

/** A ratio already divided out, as "1.02x", or "n/a". */
function times (ratio) {
  return Number.isFinite(ratio) ? ratio.toFixed(2) + 'x' : 'n/a'
}

function fmt (value, digits) {
  if (value === null || value === undefined || Number.isNaN(value)) return 'n/a'
  if (typeof value !== 'number') return String(value)
  return value.toLocaleString('en-US', { maximumFractionDigits: digits === undefined ? 0 : digits, minimumFractionDigits: digits || 0 })
}

/**
 * @param {string[]} headers
 * @param {Array<Array<string|number>>} rows
 * @returns {string}
 */
function markdownTable (headers, rows) {
  const line = (cells) => '| ' + cells.map((c) => String(c)).join(' | ') + ' |'
  const align = headers.map((_, i) => (i === 0 ? '---' : '---:'))
  return [line(headers), line(align)].concat(rows.map(line)).join('\n')
}

module.exports = { median, sameRoundMedian, ratio, times, fmt, markdownTable }
