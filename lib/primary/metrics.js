'use strict'

/**
 * Prometheus metrics for the whole cluster, kept in the primary from worker
 * heartbeats and lifecycle events. Uses its own registry so it never clashes
 * with the application's prom-client default registry.
 */

const client = require('prom-client')

/**
 * @param {import('./supervisor').Supervisor} supervisor
 */
function createMetrics (supervisor) {
  const registry = new client.Registry()
  const restarts = new client.Counter({
    name: 'clusterize_worker_exits_total',
    help: 'Worker exits by reason (crash, boot-failure, hang, memory, reload, shutdown, ...)',
    labelNames: ['reason'],
    registers: [registry]
  })
  const reloads = new client.Counter({
    name: 'clusterize_reloads_total',
    help: 'Reloads by outcome (ok, rolled_back, failed)',
    labelNames: ['outcome'],
    registers: [registry]
  })
  const requests = new client.Counter({
    name: 'clusterize_requests_total',
    help: 'HTTP requests answered by all workers',
    registers: [registry]
  })
  const workers = new client.Gauge({
    name: 'clusterize_workers',
    help: 'Workers by state',
    labelNames: ['state'],
    registers: [registry],
    collect () {
      this.reset()
      for (const state of ['starting', 'ready', 'draining', 'stopping']) this.set({ state }, 0)
      for (const record of supervisor.liveRecords()) this.inc({ state: record.state })
    }
  })
  const perWorker = (name, help, pick) => new client.Gauge({
    name,
    help,
    labelNames: ['worker', 'pid', 'generation'],
    registers: [registry],
    collect () {
      this.reset()
      for (const record of supervisor.liveRecords()) {
        if (!record.heartbeat) continue
        this.set({ worker: String(record.id), pid: String(record.pid), generation: String(record.generation) }, pick(record.heartbeat))
      }
    }
  })
  perWorker('clusterize_worker_rss_bytes', 'Resident set size of each worker', (h) => h.rss)
  perWorker('clusterize_worker_heap_used_bytes', 'V8 heap used by each worker', (h) => h.heapUsed)
  perWorker('clusterize_worker_event_loop_delay_p99_seconds', 'Event-loop delay p99 over the last heartbeat interval', (h) => h.eventLoopDelayP99Ms / 1000)
  perWorker('clusterize_worker_event_loop_utilization', 'Event-loop utilisation over the last heartbeat interval', (h) => h.eventLoopUtilization)
  perWorker('clusterize_worker_requests_in_flight', 'Requests being answered by each worker', (h) => h.inFlight)
  perWorker('clusterize_worker_pool_queue_depth', 'Offload tasks waiting for a thread in each worker', (h) => h.poolQueue || 0)
  const crashLooping = new client.Gauge({
    name: 'clusterize_crash_looping',
    help: '1 when the crash-loop breaker has tripped',
    registers: [registry],
    collect () { this.set(supervisor.crashLooping ? 1 : 0) }
  })
  void workers
  void crashLooping

  const lastServed = new WeakMap()
  supervisor.on('record:heartbeat', function countServed (record) {
    const served = record.heartbeat.served || 0
    const previous = lastServed.get(record) || 0
    if (served > previous) requests.inc(served - previous)
    lastServed.set(record, served)
  })

  return {
    registry,
    crashLooping: false,
    onExit (event) { restarts.inc({ reason: event.reason }) },
    onReload (result) { reloads.inc({ outcome: result.ok ? 'ok' : result.rolledBack ? 'rolled_back' : 'failed' }) },
    /** @returns {Promise<string>} Prometheus text exposition */
    render () { return registry.metrics() },
    contentType: registry.contentType
  }
}

module.exports = { createMetrics }
