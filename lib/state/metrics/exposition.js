'use strict'

/**
 * The app's metrics of every worker summed into one Prometheus text, by
 * prom-client's own rules and in its own format (what
 * `AggregatorRegistry.aggregate(lists).metrics()` gives, checked by
 * test/metrics-service.test.js): a metric takes its help, type and
 * aggregator from the first list that has it; each series (series name and
 * label set) is combined with that aggregator (sum by default; first, min,
 * max, average; omit drops the metric). Written here rather than called
 * from prom-client because a scrape spends most of its time there
 * (bench/metrics.js), and so the primary needs no prom-client for it.
 */

const { isMetric, aggregatorOf, seriesKey } = require('./snapshot')

/**
 * @param {object[][]} lists getMetricsAsJSON() arrays, one per worker (and the retained totals)
 * @returns {Map<string, { help: string, type: string, aggregator: string, series: Map<string, object> }>}
 */
function aggregateLists (lists) {
  const metrics = new Map()
  for (const list of lists) {
    if (!Array.isArray(list)) continue
    for (const metric of list) {
      if (!isMetric(metric)) continue
      let held = metrics.get(metric.name)
      if (held === undefined) {
        held = { help: typeof metric.help === 'string' ? metric.help : metric.name, type: metric.type, aggregator: aggregatorOf(metric), series: new Map() }
        metrics.set(metric.name, held)
      }
      if (held.aggregator === 'omit') continue
      for (const value of metric.values) {
        const key = seriesKey(value)
        if (key === null) continue
        const series = held.series.get(key)
        if (series === undefined) {
          held.series.set(key, { metricName: value.metricName, labels: value.labels, value: value.value, count: 1 })
        } else {
          combine(held.aggregator, series, value.value)
        }
      }
    }
  }
  return metrics
}

function combine (aggregator, series, value) {
  series.count++
  switch (aggregator) {
    case 'first': return
    case 'min':
      if (value < series.value) series.value = value
      return
    case 'max':
      if (value > series.value) series.value = value
      return
    default:
      // 'sum', and 'average' (divided by the count when written out)
      series.value += value
  }
}

/**
 * Prometheus text (version 0.0.4), as prom-client's Registry#metrics() writes it.
 * @param {ReturnType<typeof aggregateLists>} metrics
 * @returns {string} '' when there is no metric
 */
function formatExposition (metrics) {
  const blocks = []
  for (const [name, held] of metrics) {
    if (held.aggregator === 'omit') continue
    const escapedName = escapeString(name)
    let block = `# HELP ${escapedName} ${escapeString(held.help)}\n# TYPE ${escapedName} ${held.type}`
    for (const series of held.series.values()) {
      const value = held.aggregator === 'average' ? series.value / series.count : series.value
      block += `\n${series.metricName || escapedName}${formatLabels(series.labels)} ${valueString(value)}`
    }
    blocks.push(block)
  }
  return blocks.length === 0 ? '' : blocks.join('\n\n') + '\n'
}

/** Label text by label set: the same objects come back scrape after scrape (./values.js). */
const labelText = new WeakMap()

function formatLabels (labels) {
  if (labels === undefined || labels === null) return ''
  let text = labelText.get(labels)
  if (text === undefined) {
    text = writeLabels(labels)
    if (typeof labels === 'object') labelText.set(labels, text)
  }
  return text
}

function writeLabels (labels) {
  let out = ''
  for (const name in labels) {
    const value = labels[name]
    out += (out === '' ? '' : ',') + name + '="' + (typeof value === 'string' && NEEDS_ESCAPE.test(value) ? escapeString(value).replace(/"/g, '\\"') : value) + '"'
  }
  return out === '' ? '' : '{' + out + '}'
}

const NEEDS_ESCAPE = /[\\\n"]/

function escapeString (text) {
  if (!NEEDS_ESCAPE.test(text)) return text
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')
}

function valueString (value) {
  if (Number.isNaN(value)) return 'Nan'
  if (value === Infinity) return '+Inf'
  if (value === -Infinity) return '-Inf'
  return `${value}`
}

module.exports = { aggregateLists, formatExposition }
