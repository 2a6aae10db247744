'use strict'

/**
 * App metrics: the service the primary starts (lib/services/list.js) and
 * the worker's reporter. The primary's /metrics reads the service's `api`:
 * the app's metrics summed across workers, or one worker's own.
 */

const { MetricsService } = require('./service')
const { renderAggregate, renderWorker } = require('./render')
const { OP, SERVICE } = require('./ops')

/**
 * The service definition for lib/services: `start(context)` returns its handlers.
 * With `metrics: false` it has none (the workers report nothing either).
 */
const metricsService = {
  name: SERVICE,
  handover: { crosses: 'handedOver', what: 'the totals of gone workers and the last report of each old worker, which report to the new primary from then on: no app counter goes down' },
  start (context) {
    const options = context && context.config && context.config.metrics
    if (!options) return {}
    const app = createAppMetrics(options)
    return {
      requests: { [OP.NEXT]: (data, caller) => app.service.next(data, caller) },
      notifications: { [OP.REPORT]: (data, caller) => app.service.report(data, caller) },
      workerExit: (caller) => app.service.workerExit(caller),
      close: () => app.service.close(),
      handover: {
        export: () => app.service.exportState(),
        import: (items) => app.service.importState(items)
      },
      api: app
    }
  }
}

/**
 * @param {{ timeoutMs: number }} options config.metrics
 * @returns {{ service: MetricsService, render: () => Promise<string>, renderWorker: (slot: number) => Promise<string> }}
 */
function createAppMetrics (options) {
  const service = new MetricsService({ timeoutMs: options.timeoutMs })
  // Scrapes that come while one is being answered share its round and its text: a flood of
  // scrapes costs one question per worker and one rendering at a time.
  let rendering = null
  return {
    service,
    /** The app's metrics summed across workers, '' when no worker has any. */
    render () {
      if (rendering === null) {
        rendering = service.collect().then(renderAggregate)
        rendering.then(function rendered () { rendering = null })
      }
      return rendering
    },
    /** One worker's own values (slot id), for debugging; rejects with status 404 for a slot without app metrics. */
    renderWorker (slot) {
      return service.collect().then(function pickWorker (collection) {
        // During a reload a slot's old and new worker both report: the newest is the one serving.
        const worker = collection.workers.filter((entry) => entry.slot === slot).pop()
        if (!worker) {
          const err = new Error(`no worker ${slot} with app metrics: try one of ${collection.workers.map((entry) => entry.slot).join(', ') || '(none)'}`)
          err.status = 404
          throw err
        }
        return renderWorker(worker)
      })
    }
  }
}

module.exports = { metricsService, createAppMetrics }
