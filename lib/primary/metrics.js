'use strict'

/**
 * Prometheus metrics for the whole cluster, kept in the primary from worker
 * heartbeats and lifecycle events. The primary only tallies plain numbers;
 * prom-client is loaded, and its own registry built (it never clashes with
 * the application's default registry), the first time /metrics is read, so
 * a primary nobody scrapes stays as small as node:cluster's.
 */

const STATES = ['starting', 'ready', 'draining', 'stopping']

/**
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {() => object} busStatus the bus status (queued bytes, drops)
 * @param {() => { connections: object|null, dashboard: object|null }} [primaryStatus] the
 *   dispatcher's held and shed connections, the dashboard's stream counters (null when off)
 * @param {() => (ReturnType<import('../state/metrics').createAppMetrics>|undefined)} [appMetricsOf] the app's
 *   prom-client metrics aggregated across workers (the metrics service's api), served in the same scrape
 */
function createMetrics (supervisor, busStatus, primaryStatus = () => ({ connections: null, dashboard: null }), appMetricsOf) {
  const exitsByReason = new Map()
  const reloadsByOutcome = new Map()
  const lastServed = new WeakMap()
  let requestsTotal = 0
  let exposition = null

  supervisor.on('record:heartbeat', function countServed (record) {
    const served = record.heartbeat.served || 0
    const previous = lastServed.get(record) || 0
    if (served > previous) requestsTotal += served - previous
    lastServed.set(record, served)
  })

  function tally (map, key) {
    map.set(key, (map.get(key) || 0) + 1)
  }

  function build () {
    const client = require('prom-client')
    const registry = new client.Registry()
    const fromTally = (name, help, label, map) => new client.Counter({
      name,
      help,
      labelNames: [label],
      registers: [registry],
      collect () {
        this.reset()
        for (const [key, value] of map) this.inc({ [label]: key }, value)
      }
    })
    fromTally('clusterize_worker_exits_total', 'Worker exits by reason (crash, boot-failure, hang, memory, reload, shutdown, ...)', 'reason', exitsByReason)
    new client.Counter({
      name: 'clusterize_worker_failures_total',
      help: 'Worker failures by kind: request (a worker up restart.stableAfterMs crashed or hung: restarted at once, not counted by the crash-loop breaker), start (failed boot or early failure: counted by the breaker), fork (the process could not be spawned)',
      labelNames: ['kind'],
      registers: [registry],
      collect () {
        this.reset()
        for (const [kind, value] of Object.entries(supervisor.failureCounts)) this.inc({ kind }, value)
      }
    })
    fromTally('clusterize_reloads_total', 'Reloads by outcome (ok, rolled_back, failed)', 'outcome', reloadsByOutcome)
    new client.Counter({
      name: 'clusterize_requests_total',
      help: 'HTTP requests answered by all workers',
      registers: [registry],
      collect () {
        this.reset()
        this.inc(requestsTotal)
      }
    })
    new client.Gauge({
      name: 'clusterize_workers',
      help: 'Workers by state',
      labelNames: ['state'],
      registers: [registry],
      collect () {
        this.reset()
        for (const state of STATES) this.set({ state }, 0)
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
    perWorker('clusterize_worker_websockets', 'Open upgraded connections (WebSockets) of each worker', (h) => h.webSockets || 0)
    perWorker('clusterize_worker_idle_connections', 'Connections with no request in flight on each worker', (h) => h.idleConnections || 0)
    perWorker('clusterize_worker_slow_bodies_shed', 'Requests each worker answered 408 and closed because their body arrived slower than slowBody.minBytesPerSecond (since it started)', (h) => h.slowBodyShed || 0)
    perWorker('clusterize_worker_idle_connections_shed', 'Idle connections each worker closed because more than maxIdleConnections were idle (since it started)', (h) => h.idleShed || 0)
    perWorker('clusterize_worker_fd_exhausted', '1 while a worker is out of file descriptors (EMFILE/ENFILE); its RSS is then the last one read', (h) => (h.fdExhausted ? 1 : 0))
    perWorker('clusterize_worker_pool_queue_depth', 'Offload tasks waiting for a thread in each worker', (h) => h.poolQueue || 0)
    new client.Gauge({
      name: 'clusterize_bus_queued_bytes',
      help: 'Bus bytes the primary holds queued towards its workers',
      registers: [registry],
      collect () { this.set(busStatus().queuedBytes || 0) }
    })
    new client.Counter({
      name: 'clusterize_bus_dropped_total',
      help: 'Bus messages dropped for stuck workers (bus.stallTimeoutMs) or past the primary\'s own bound (bus.maxQueuedBytes)',
      registers: [registry],
      collect () {
        this.reset()
        this.inc(busStatus().dropped || 0)
      }
    })
    new client.Gauge({
      name: 'clusterize_bus_stuck_workers',
      help: 'Workers that read none of their bus messages for bus.stallTimeoutMs (messages to them are dropped)',
      registers: [registry],
      collect () { this.set(busStatus().stuckWorkers || 0) }
    })
    new client.Gauge({
      name: 'clusterize_bus_bridge_buffered_bytes',
      help: 'Broadcast bytes waiting for Redis to come back (bus.outageBufferBytes)',
      registers: [registry],
      collect () {
        const bridge = busStatus().bridge
        this.set((bridge && bridge.bufferedBytes) || 0)
      }
    })
    new client.Counter({
      name: 'clusterize_bus_bridge_dropped_total',
      help: 'Broadcasts not sent to the other hosts: past bus.outageBufferBytes while Redis was away, or refused as malformed/oversized on receipt',
      registers: [registry],
      collect () {
        this.reset()
        const bridge = busStatus().bridge
        this.inc((bridge && bridge.dropped) || 0)
      }
    })
    definePrimaryMetrics(client, registry, primaryStatus)
    new client.Gauge({
      name: 'clusterize_crash_looping',
      help: '1 while the crash-loop breaker is open (the code on disk keeps failing soon after it starts; failed workers are retried at restart.backoffMaxMs)',
      registers: [registry],
      collect () { this.set(supervisor.crashLooping ? 1 : 0) }
    })
    return registry
  }

  return {
    onExit (event) { tally(exitsByReason, event.reason) },
    onReload (result) { tally(reloadsByOutcome, result.ok ? 'ok' : result.rolledBack ? 'rolled_back' : 'failed') },
    /**
     * @param {{ worker?: number }} [query] `worker`: that worker's own app metrics only
     * @returns {Promise<string>} Prometheus text exposition
     */
    render (query) {
      if (!exposition) exposition = build()
      const appMetrics = appMetricsOf ? appMetricsOf() : undefined
      if (query && query.worker !== undefined) {
        if (!appMetrics) return Promise.reject(Object.assign(new Error('app metrics are off (metrics: false)'), { status: 404 }))
        return appMetrics.renderWorker(query.worker)
      }
      if (!appMetrics) return exposition.metrics()
      // Ask the workers first and let the question leave (IPC writes go out on the next turn),
      // then write clusterize's own metrics while they read theirs.
      const app = appMetrics.render()
      return new Promise(setImmediate)
        .then(() => exposition.metrics())
        .then((own) => app.then((text) => own + text))
    },
    get contentType () {
      if (!exposition) exposition = build()
      return exposition.contentType
    }
  }
}

/**
 * The primary's own connections ('rr', 'sticky': held for a ready worker or, with sticky.sid,
 * for their request line) and the dashboard's event streams. Counters read 0 when a part is off.
 */
function definePrimaryMetrics (client, registry, primaryStatus) {
  const counter = (name, help, labelNames, fill) => new client.Counter({
    name,
    help,
    labelNames,
    registers: [registry],
    collect () {
      this.reset()
      fill(this, primaryStatus())
    }
  })
  new client.Gauge({
    name: 'clusterize_primary_held_connections',
    help: 'Connections the primary holds itself: waiting for a ready worker (pending), with sticky.sid for their request line (awaiting), or on their way to a worker (handoff)',
    labelNames: ['queue'],
    registers: [registry],
    collect () {
      const connections = primaryStatus().connections || {}
      this.set({ queue: 'pending' }, connections.pending || 0)
      this.set({ queue: 'awaiting' }, connections.awaiting || 0)
      this.set({ queue: 'handoff' }, connections.handoff || 0)
    }
  })
  counter('clusterize_primary_connections_shed_total', 'Connections the primary closed for its bounds (maxIdleConnections): refused while too many waited for a ready worker (pending), the oldest silent ones with sticky.sid (awaiting), or refused while a worker had its share on its way to it (handoff)', ['queue'], (metric, status) => {
    const connections = status.connections || {}
    metric.inc({ queue: 'pending' }, connections.pendingShed || 0)
    metric.inc({ queue: 'awaiting' }, connections.awaitingShed || 0)
    metric.inc({ queue: 'handoff' }, connections.handoffShed || 0)
  })
  counter('clusterize_probes_connections_closed_total', 'Probes connections closed for probes.maxConnections or the primary\'s descriptor reserve: idle ones shed to make room (shed), newcomers refused with none idle (refused), requests with a body (body, 413)', ['reason'], (metric, status) => {
    const probes = status.probes || {}
    metric.inc({ reason: 'shed' }, probes.shed || 0)
    metric.inc({ reason: 'refused' }, probes.refused || 0)
    metric.inc({ reason: 'body' }, probes.bodyRefused || 0)
  })
  counter('clusterize_log_lines_dropped_total', 'Log lines the primary could not write: its stdout/stderr (or --json) reader went away or stopped reading', [], (metric, status) => {
    metric.inc((status.output || {}).dropped || 0)
  })
  counter('clusterize_primary_bound_reached_total', 'What the bounds of the stores the primary holds turned away: sessions evicted for clusterStore.maxSessions/maxTotalBytes (sessions), new rate-limit clients refused when the counters are full (rate_limit_keys), socket.io recovery sessions dropped for recovery.maxSessions (recovery_sessions), socket.io broadcasts numbered while Redis was away and not sent to the other hosts for recovery.maxPackets (recovery_unsent)', ['bound'], (metric, status) => {
    const bounds = status.bounds || {}
    metric.inc({ bound: 'sessions' }, bounds.sessionsEvicted || 0)
    metric.inc({ bound: 'rate_limit_keys' }, bounds.rateLimitKeysRefused || 0)
    metric.inc({ bound: 'recovery_sessions' }, bounds.recoverySessionsDropped || 0)
    metric.inc({ bound: 'recovery_unsent' }, bounds.recoveryUnsentDropped || 0)
  })
  new client.Gauge({
    name: 'clusterize_dashboard_streams',
    help: 'Open dashboard event streams',
    registers: [registry],
    collect () { this.set((primaryStatus().dashboard || {}).open || 0) }
  })
  counter('clusterize_dashboard_streams_evicted_total', 'Dashboard event streams closed because their client stopped reading (probes.streamBufferBytes)', [], (metric, status) => {
    metric.inc((status.dashboard || {}).evicted || 0)
  })
  counter('clusterize_dashboard_refused_total', 'Dashboard requests refused: new event streams past probes.maxStreams or probes.streamsPerMinute (stream), history requests past probes.streamsPerMinute (history)', ['request'], (metric, status) => {
    const dashboard = status.dashboard || {}
    metric.inc({ request: 'stream' }, dashboard.refused || 0)
    metric.inc({ request: 'history' }, dashboard.historyRefused || 0)
  })
}

module.exports = { createMetrics }
