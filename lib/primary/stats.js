'use strict'

/**
 * The primary's stats() (also served as /stats): the cluster and every worker
 * with its last heartbeat.
 */

const { singletonStats } = require('../state/singleton-stats')
const { outputStatus } = require('../safe-write')

/**
 * @param {object} parts
 * @param {import('./supervisor').Supervisor} parts.supervisor
 * @param {object|null} parts.dispatcher the acceptor ('rr' and 'sticky'), or null
 * @param {object|null} [parts.balancer] the shared socket's keeper ('balanced'), or null
 * @param {object|null} parts.health
 * @param {{ mode: string, port: number, shuttingDown: boolean, reloads: number }} parts.state
 * @param {boolean} parts.ready
 * @param {boolean} parts.live
 * @param {object} parts.bus the bus status
 * @param {object} [parts.sessions] what the cluster session store holds
 * @param {object} [parts.dashboard] the dashboard's stream counters, when it is on
 * @param {{ list: () => object[] }} [parts.singletons] the singleton service's api
 * @param {{ sessionsEvicted: number, rateLimitKeysRefused: number, recoverySessionsDropped: number, recoveryUnsentDropped: number }} [parts.bounds]
 *   what the bounds of the primary's stores evicted or refused since it started
 * @param {object} [parts.scaling] the worker count and what sets it (./autoscale.js)
 * @returns {object}
 */
function buildStats (parts) {
  const { supervisor, dispatcher, balancer, health, state } = parts
  const now = Date.now()
  const workers = supervisor.liveRecords().map((record) => ({
    id: record.id,
    pid: record.pid,
    generation: record.generation,
    state: record.publicView().state,
    uptimeMs: now - record.startedAt,
    restarts: record.restarts,
    overloaded: health ? health.isOverloaded(record) : false,
    connectionsHanded: dispatcher ? dispatcher.connectionsHanded(record) : undefined,
    balance: balancer ? balancer.loadOf(record) : undefined,
    heartbeatAgeMs: record.heartbeatAt ? now - record.heartbeatAt : null,
    heartbeat: record.heartbeat,
    session: record.session
  })).sort((a, b) => slotOrder(a) - slotOrder(b) || a.generation - b.generation)
  return {
    pid: process.pid,
    port: state.port,
    scheduling: state.mode,
    generation: supervisor.generation,
    ready: parts.ready,
    live: parts.live,
    crashLooping: supervisor.crashLooping,
    shuttingDown: state.shuttingDown,
    reloads: state.reloads,
    // request: crashes and hangs of workers that had stayed up restart.stableAfterMs (never
    // counted by the breaker); start: failed boots and early failures; fork: failed spawns.
    failures: Object.assign({}, supervisor.failureCounts),
    // Slots with no worker because their last fork failed: /ready answers 503 meanwhile.
    cannotFork: Array.from(supervisor.forkFailing).sort((a, b) => a - b),
    // How many worker slots there are and what sets the count (scale(), 'auto' and the CPU quota, dynamic workers).
    scaling: parts.scaling,
    workers,
    // Connections the primary holds itself ('rr', 'sticky') and those it closed for the bounds.
    connections: dispatcher ? dispatcher.status() : undefined,
    bus: parts.bus,
    sessions: parts.sessions,
    // Which worker runs each singleton() job: by the live workers' slots, spares and retiring ones included.
    singletons: singletonStats(parts.singletons, supervisor.liveRecords(), now),
    dashboard: parts.dashboard,
    // Probes connections open, and those closed or refused for probes.maxConnections and the descriptor reserve.
    probes: parts.probes,
    // Log lines the primary could not write: its stdout/stderr (or --json) reader went away or stalled.
    output: outputStatus(),
    // clusterStore.maxSessions/maxTotalBytes evictions, rate-limit keys refused when full, recovery.maxSessions drops.
    bounds: parts.bounds
  }
}

/** Slots in order, spares (id -1) last. */
function slotOrder (worker) {
  return worker.id < 0 ? Number.MAX_SAFE_INTEGER : worker.id
}

module.exports = { buildStats }
