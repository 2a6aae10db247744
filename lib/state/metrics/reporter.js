'use strict'

/**
 * A worker's half of app-metrics aggregation: reads the app's prom-client
 * registries and reports them to the primary's MetricsService, on an
 * interval (so a worker that crashes loses at most one interval of counts)
 * and whenever a scrape asks. clusterize never loads prom-client here: by
 * default it reads the default registry of each prom-client copy the app
 * itself loaded (found in require.cache), so a worker whose app has no
 * metrics does nothing but look once per interval.
 */

const debug = require('debug')('clusterize:metrics')
const { OP } = require('./ops')

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
 * @param {{ notify: (op: string, data: object) => void, on: (op: string, handler: (data: object) => void) => void }} options.client
 *   the service client: notify() reaches the primary's MetricsService, on() receives its requests
 * @param {undefined|object[]|(() => object[])} [options.registries] metrics.registries
 * @param {number} options.pushIntervalMs
 * @returns {{ push: () => Promise<void>, stop: () => void }}
 */
function startMetricsReporter (options) {
  const { client } = options
  let registries = []
  let stopped = false

  /** Read the registries and report them with `seq` (0: an interval push). */
  async function report (seq) {
    if (stopped) return
    if (registries.length === 0 || typeof options.registries === 'function') registries = safeFind(options.registries)
    if (registries.length === 0) {
      // Asked by a scrape, yet no registry (any more): answer so the scrape does not wait.
      if (seq !== 0) client.notify(OP.REPORT, { seq, metrics: [] })
      return
    }
    let metrics = []
    try {
      const lists = await Promise.all(registries.map((registry) => registry.getMetricsAsJSON()))
      metrics = [].concat(...lists)
    } catch (err) {
      // An app collect() callback that throws: report nothing new rather than crash the worker.
      debug('reading the registries failed: %s', err && err.message)
      if (seq === 0) return
    }
    if (!stopped) client.notify(OP.REPORT, { seq, metrics })
  }

  client.on(OP.COLLECT, function onCollect (data) {
    report(data && Number.isInteger(data.seq) ? data.seq : 0).catch(noteFailure)
  })
  const timer = setInterval(function pushMetrics () { report(0).catch(noteFailure) }, options.pushIntervalMs)
  timer.unref()

  return {
    /** Report now (at boot, and as a worker's last word before it exits). */
    push () { return report(0).catch(noteFailure) },
    stop () {
      stopped = true
      clearInterval(timer)
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
