'use strict'

/**
 * Watches heartbeats: a worker that stops sending them is hung (a busy loop
 * blocks its timers) and is killed and replaced; one over the memory limits
 * is recycled gracefully before V8 runs out of heap; one whose event loop is
 * overloaded is skipped by the scheduler until it recovers.
 */

const { STATES } = require('./worker-record')

const MB = 1024 * 1024

/**
 * @param {object} config resolved configuration
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {object} log
 * @param {{ recycle: (record: object, reason: string) => void, isReplacing: (record: object) => boolean }} replacer
 *   replace-then-drain, from the reloader
 * @returns {{ stop: () => void, isOverloaded: (record: object) => boolean }}
 */
function watchHealth (config, supervisor, log, replacer) {
  const { heartbeatMs, heartbeatTimeoutMs, maxMemoryMB, maxHeapRatio, maxEventLoopDelayMs } = config.health
  const overloaded = new WeakSet()
  const recycle = replacer.recycle

  function onHeartbeat (record) {
    const figures = record.heartbeat
    if (judgeOverloaded(record)) overloaded.add(record)
    else overloaded.delete(record)
    if (!record.isReady() || record.spare || replacer.isReplacing(record)) return
    if (maxMemoryMB > 0 && figures.rss > maxMemoryMB * MB) {
      log.warn(`worker ${record.id} uses ${Math.round(figures.rss / MB)} MB RSS (limit ${maxMemoryMB} MB), recycling it`, { pid: record.pid })
      recycle(record, 'memory')
    } else if (maxHeapRatio > 0 && maxHeapRatio < 1 && figures.heapUsed > figures.heapLimit * maxHeapRatio) {
      log.warn(`worker ${record.id} heap at ${Math.round(100 * figures.heapUsed / figures.heapLimit)}% of its limit (max ${Math.round(maxHeapRatio * 100)}%), recycling it`, { pid: record.pid })
      recycle(record, 'memory')
    }
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
      supervisor.kill(record, 'hang')
    }
  }

  supervisor.on('record:heartbeat', onHeartbeat)
  const timer = setInterval(checkHangs, Math.min(heartbeatMs, 1000))
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
