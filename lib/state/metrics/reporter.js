'use strict'

/**
 * A worker's half of app-metrics aggregation: reads the app's prom-client
 * registries and reports them to the primary's MetricsService, on an
 * interval (so a worker that crashes loses at most one interval of counts)
 * and whenever a scrape asks (a question the primary holds until then, so
 * a scrape reads values as fresh as the moment it came). clusterize never loads prom-client here: by
 * default it reads the default registry of each prom-client copy the app
 * itself loaded (found in require.cache), so a worker whose app has no
 * metrics does nothing but look once per interval.
 */

const debug = require('debug')('clusterize:metrics')
const { OP, HOLD_MS } = require('./ops')
const { valuesIfSameShape } = require('./values')

const PROM_CLIENT_ENTRY = /[\\/]node_modules[\\/]prom-client[\\/]index\.js$/

/**
 * The registries to report.
 * @param {undefined|object[]|(() => object[])} option metrics.registries
 * @returns {object[]}
 */
function findRegistries (option) {
  if (typeof option === 'function') return [].concat(option() || [])
  if (Array.isArray(option)) return option
  const found = []
  for (const file of Object.keys(require.cache)) {
    if (!PROM_CLIENT_ENTRY.test(file)) continue
    const exported = require.cache[file].exports
    if (exported && exported.register && typeof exported.register.getMetricsAsJSON === 'function') found.push(exported.register)
  }
  return found
}

/**
 * @param {object} options
 * @param {{ request: (op: string, data?: *, options?: { timeoutMs?: number }) => Promise<*>, notify: (op: string, data: *) => boolean }} options.client
 *   the metrics service's client (lib/services serviceClient)
 * @param {undefined|object[]|(() => object[])} [options.registries] metrics.registries
 * @param {number} options.pushIntervalMs
 * @param {number} [options.holdMs] how long the primary may hold a question (its HOLD_MS)
 * @returns {{ push: () => Promise<void>, stop: () => void }}
 */
function startMetricsReporter (options) {
  const { client } = options
  const holdMs = options.holdMs || HOLD_MS
  let registries = []
  let stopped = false
  let listening = false
  let retryTimer = null
  /** The last full report the primary holds, { id, metrics }: later reports of its shape send numbers only (./values.js). */
  let shape = null
  let shapes = 0
  /** Set once the primary said it takes values reports (an older primary would read one as empty). */
  let primaryTakesValues = false

  /** Read the registries and report them with `seq` (0: an interval push). */
  async function report (seq) {
    if (stopped) return
    if (registries.length === 0 || typeof options.registries === 'function') registries = safeFind(options.registries)
    if (registries.length === 0) {
      // Asked by a scrape, yet no registry (any more): answer so the scrape does not wait.
      if (seq !== 0) client.notify(OP.REPORT, { seq, metrics: [] })
      return
    }
    let metrics
    try {
      const lists = await Promise.all(registries.map((registry) => registry.getMetricsAsJSON()))
      metrics = [].concat(...lists)
    } catch (err) {
      // An app collect() callback that throws: null tells the primary to keep this worker's last
      // values (an empty report would make its counters go down).
      debug('reading the registries failed: %s', err && err.message)
      if (seq === 0) return
      metrics = null
    }
    if (stopped) return
    const values = metrics !== null && shape !== null && primaryTakesValues ? valuesIfSameShape(shape.metrics, metrics) : null
    if (values !== null) {
      client.notify(OP.REPORT, { seq, shape: shape.id, values })
    } else if (metrics === null) {
      client.notify(OP.REPORT, { seq, metrics })
    } else {
      shape = { id: ++shapes, metrics }
      client.notify(OP.REPORT, { seq, shape: shape.id, metrics })
    }
    // From the first report on, this worker has metrics: wait for the scrapes' questions.
    if (!listening) {
      listening = true
      listen()
    }
  }

  /** One question at a time held by the primary; answered when a scrape wants fresh values. */
  function listen () {
    if (stopped) return
    client.request(OP.NEXT, null, { timeoutMs: holdMs + 10000 }).then(function onQuestion (question) {
      if (question && question.values === true) primaryTakesValues = true
      const seq = question && Number.isInteger(question.seq) && question.seq > 0 ? question.seq : 0
      // full: the primary does not hold our last full report (it restarted, or refused a values report).
      if (question && question.full === true) shape = null
      if (seq > 0 || (question && question.full === true)) report(seq).catch(noteFailure)
      listen()
    }, function onFailure (err) {
      // No primary (yet, or any more): ask again later, never in a tight loop.
      debug('waiting for scrapes failed: %s', err && err.message)
      retryTimer = setTimeout(listen, options.pushIntervalMs)
      retryTimer.unref()
    })
  }

  const timer = setInterval(function pushMetrics () { report(0).catch(noteFailure) }, options.pushIntervalMs)
  timer.unref()

  return {
    /** Report now (at boot, and as a worker's last word before it exits). */
    push () { return report(0).catch(noteFailure) },
    stop () {
      stopped = true
      clearInterval(timer)
      clearTimeout(retryTimer)
    }
  }
}

function safeFind (option) {
  try {
    return findRegistries(option)
  } catch (err) {
    debug('metrics.registries failed: %s', err && err.message)
    return []
  }
}

function noteFailure (err) {
  debug('metrics report failed: %s', err && err.message)
}

module.exports = { startMetricsReporter, findRegistries }
