'use strict'

/**
 * What moves the worker count by itself:
 * - `workers: 'auto'` follows the CPU quota live: the quota is read again
 *   every few seconds (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`; a
 *   Kubernetes in-place resize changes it under a running pod) and the
 *   count follows it, until someone scales by hand (that pins the count);
 * - `workers: { min, max }` (dynamic workers) adds a worker while the
 *   workers' event-loop utilization stays high and retires one while it
 *   stays low (./scale-policy.js), never above max nor the CPU quota, and
 *   adds one only while memory (the cgroup's `memory.max`, else the
 *   machine's free memory) has room for one more worker's measured RSS.
 * Every change goes through the primary's queue of reloads and scalings,
 * and every decision is logged.
 */

const os = require('os')
const debug = require('debug')('clusterize:autoscale')
const { availableCpus } = require('../cpus')
const { memoryLimit } = require('../cgroup')
const { createScalePolicy } = require('./scale-policy')

/** How often the CPU quota is read again; CLUSTERIZE_CPU_QUOTA_POLL_MS (internal) for tests. */
const QUOTA_POLL_MS = 5000

/**
 * @param {{ config: object, supervisor: import('./supervisor').Supervisor, log: object,
 *   resize: (target: number, why: string) => Promise<object>, busy: () => boolean }} parts
 *   `resize` queues a change of the worker count; `busy`: a reload or scaling is under way
 * @returns {{ stop: () => void, pin: (count: number) => void, status: () => object }}
 */
function startAutoscale (parts) {
  const { config, supervisor, log, resize, busy } = parts
  const dynamic = config.dynamicWorkers
  const follow = config.workersAuto === true
  const pollMs = Number(process.env.CLUSTERIZE_CPU_QUOTA_POLL_MS) || QUOTA_POLL_MS
  let cpus = availableCpus()
  let pinned = false
  let pending = false
  let lastDecision = null
  let lastHeld = null
  const timers = []

  if (follow || (dynamic && dynamic.max === 'auto')) {
    timers.push(setInterval(watchQuota, pollMs))
  }
  let policy = null
  if (dynamic) {
    policy = createScalePolicy(dynamic)
    timers.push(setInterval(judgeLoad, Math.min(config.health.heartbeatMs, 1000)))
  }
  for (const timer of timers) timer.unref()

  /** The most workers dynamic scaling may run now. */
  function cap () {
    return dynamic.max === 'auto' ? cpus : Math.min(dynamic.max, cpus)
  }

  function watchQuota () {
    const now = availableCpus()
    if (now === cpus) return
    const before = cpus
    cpus = now
    if (follow && !pinned) {
      log.info(`CPU quota changed: ${before} -> ${now} CPUs; workers: 'auto' follows it`)
      change(now, 'cpu quota')
    } else if (dynamic) {
      log.info(`CPU quota changed: ${before} -> ${now} CPUs; dynamic workers may now run up to ${Math.max(dynamic.min, cap())}`)
    } else {
      log.info(`CPU quota changed: ${before} -> ${now} CPUs; the worker count stays at ${supervisor.slots.length} (scaled by hand)`)
    }
  }

  function judgeLoad () {
    if (pending || busy() || supervisor.isStopped()) return
    const now = Date.now()
    const staleMs = 3 * config.health.heartbeatMs
    const elu = []
    for (const record of supervisor.readyRecords()) {
      const figures = record.heartbeat
      if (!figures || record.heartbeatAt < record.readyAt || now - record.heartbeatAt > staleMs) continue
      elu.push(figures.eventLoopUtilization)
    }
    const count = supervisor.slots.length
    const decision = policy.decide({ now, count, elu, cap: cap(), memoryRoom: elu.length > 0 ? memoryRoom() : true })
    if (decision.action === 'hold') {
      // Say once why a wanted worker is not added (the cap, memory); quiet otherwise.
      const held = / but (.*)$/.exec(decision.reason)
      if (held && held[1] !== lastHeld) log.info(`dynamic workers: not adding a worker: ${decision.reason}`)
      lastHeld = held ? held[1] : null
      return
    }
    lastHeld = null
    lastDecision = { at: now, from: count, to: decision.target, reason: decision.reason }
    log.info(`dynamic workers: ${decision.action === 'up' ? 'adding' : 'retiring'} ${Math.abs(decision.target - count) === 1 ? 'a worker' : 'workers'} (${count} -> ${decision.target}): ${decision.reason}`)
    // Above the cap only when the CPU quota shrank: scale() refuses counts above workers.max.
    change(decision.target, decision.cause === 'cap' ? 'cpu quota' : decision.cause === 'min' ? 'workers.min' : 'load')
  }

  /** Room for one more worker of the largest measured RSS. */
  function memoryRoom () {
    let rss = 0
    for (const record of supervisor.liveRecords()) {
      if (record.heartbeat && record.heartbeat.rss > rss) rss = record.heartbeat.rss
    }
    const limit = memoryLimit()
    const room = limit ? limit.limit - limit.used : os.freemem()
    debug('memory room %d, one worker %d', room, rss)
    return room >= rss
  }

  function change (target, why) {
    pending = true
    resize(target, why).then((result) => {
      if (policy) policy.restartWindows()
      if (!result.ok) debug('scaling to %d: %s', target, result.reason)
    }, (err) => log.error(`scaling to ${target} failed: ${err.message}`)).finally(() => { pending = false })
  }

  return {
    stop () {
      for (const timer of timers) clearInterval(timer)
    },
    /** Scaled by hand: 'auto' stops following the CPU quota. */
    pin (count) {
      if (follow && !pinned) log.info(`workers pinned at ${count}: no longer following the CPU quota until the primary restarts`)
      pinned = true
    },
    status () {
      return {
        mode: dynamic ? 'dynamic' : follow ? (pinned ? 'pinned' : 'auto') : 'fixed',
        workers: supervisor.slots.length,
        cpus,
        min: dynamic ? dynamic.min : undefined,
        max: dynamic ? Math.max(dynamic.min, cap()) : undefined,
        lastDecision
      }
    }
  }
}

module.exports = { startAutoscale }
