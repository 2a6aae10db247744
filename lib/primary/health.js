'use strict'

/**
 * Watches heartbeats: a worker that stops sending them is hung (a busy loop
 * blocks its timers) and is killed and replaced; one over the memory limits
 * is recycled gracefully before V8 runs out of heap (./heap-guard.js); one whose event loop is
 * overloaded is skipped by the scheduler until it recovers.
 */

const { STATES } = require('./worker-record')
const { createHeapGuard } = require('./heap-guard')

const MB = 1024 * 1024

/**
 * @param {object} config resolved configuration
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {object} log
 * @param {{ recycle: (record: object, reason: string, detail?: string) => void, isReplacing: (record: object) => boolean }} replacer
 *   replace-then-drain, from the reloader
 * @returns {{ stop: () => void, isOverloaded: (record: object) => boolean }}
 */
function watchHealth (config, supervisor, log, replacer) {
  const { heartbeatMs, heartbeatTimeoutMs, maxMemoryMB, maxEventLoopDelayMs } = config.health
  const overloaded = new WeakSet()
  const judgeHeap = createHeapGuard(config.health)
  const recycle = replacer.recycle

  function onHeartbeat (record) {
    const figures = record.heartbeat
    if (judgeOverloaded(record)) overloaded.add(record)
    else overloaded.delete(record)
    const heapProblem = judgeHeap(record, figures, record.heartbeatAt)
    if (!record.isReady() || record.spare || replacer.isReplacing(record)) return
    let problem = null
    if (maxMemoryMB > 0 && figures.rss > maxMemoryMB * MB) {
      problem = `uses ${Math.round(figures.rss / MB)} MB RSS (limit ${maxMemoryMB} MB)`
    } else {
      problem = heapProblem
    }
    if (!problem) return
    log.warn(`worker ${record.id} ${problem}: recycling it`, { pid: record.pid, generation: record.generation })
    recycle(record, 'memory', problem)
  }

  /**
   * Over the limit AND clearly worse than the best other worker: when the
   * whole machine is busy every worker is slow, and skipping one would only
   * pile its share onto the others.
   */
  function judgeOverloaded (record) {
    const delay = record.heartbeat.eventLoopDelayP99Ms
    if (maxEventLoopDelayMs <= 0 || delay <= maxEventLoopDelayMs) return false
    let best = Infinity
    for (const other of supervisor.readyRecords()) {
      if (other !== record && other.heartbeat) best = Math.min(best, other.heartbeat.eventLoopDelayP99Ms)
    }
    return best === Infinity || delay > 2 * best
  }

  function checkHangs () {
    const now = Date.now()
    for (const record of supervisor.liveRecords()) {
      if (!record.isReady() && record.state !== STATES.DRAINING) continue
      const last = record.heartbeatAt || record.readyAt
      if (now - last <= heartbeatTimeoutMs) continue
      log.error(`worker ${record.id} sent no heartbeat for ${now - last} ms (timeout ${heartbeatTimeoutMs} ms), killing it`, {
        pid: record.pid,
        lastState: record.heartbeat || undefined
      })
      supervisor.kill(record, 'hang', `sent no heartbeat for ${now - last} ms (health.heartbeatTimeoutMs is ${heartbeatTimeoutMs})`)
    }
  }

  supervisor.on('record:heartbeat', onHeartbeat)
  const intervalMs = Math.min(heartbeatMs, 1000)
  let lastTickAt = Date.now()
  const timer = setInterval(function tick () {
    const now = Date.now()
    const late = now - lastTickAt > 2 * intervalMs
    lastTickAt = now
    // The primary itself was held up (a loaded machine, a long GC): heartbeats may be waiting
    // unread in the IPC pipes, and timers run before I/O. Judge them next round, not as silence;
    // the same rule as the reload's watch (./rollout-watch.js).
    if (!late) checkHangs()
  }, intervalMs)
  timer.unref()
  return {
    stop () {
      clearInterval(timer)
      supervisor.removeListener('record:heartbeat', onHeartbeat)
    },
    /** Its event loop is clearly worse than the others': skip it for new connections. */
    isOverloaded: (record) => overloaded.has(record)
  }
}

module.exports = { watchHealth }
