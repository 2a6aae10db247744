'use strict'

/**
 * Samples the worker's health for the primary: memory, event-loop delay
 * and utilisation, request counters and thread-pool queue depth.
 */

const v8 = require('v8')
const fs = require('fs')
const os = require('os')
const { monitorEventLoopDelay, performance } = require('perf_hooks')
const poolRegistry = require('../pool/registry')
const { oldGenerationLimit } = require('./heap-limit')
const { outputStatus } = require('../safe-write')

/** Always there to open, and opening it touches no disk. */
const DEV_NULL = os.devNull

/**
 * @param {{ inFlight: number, served: number, connections: number }} tracker
 * @param {{ onFdExhausted?: (err: Error) => void, intervalMs?: number }} [options] onFdExhausted:
 *   called once, the first time the process is out of file descriptors; intervalMs: how often
 *   sample() is called (its timer's lateness counts as event-loop delay)
 * @returns {{ sample: () => object, stop: () => void }}
 */
function createHealthSampler (tracker, options) {
  const delay = monitorEventLoopDelay({ resolution: 10 })
  delay.enable()
  let lastElu = performance.eventLoopUtilization()
  const heapOldLimit = oldGenerationLimit(v8.getHeapStatistics().heap_size_limit)
  const heapLimit = v8.getHeapStatistics().heap_size_limit
  const memory = readMemory(options && options.onFdExhausted)
  const intervalMs = (options && options.intervalMs) || 0
  let lastSampleAt = performance.now()

  function sample () {
    // How late this sample's own timer ran: a lower bound on the loop's delay. The histogram
    // alone can come back empty after a long block (on Node 24 its sampling timer and ours
    // fire in either order), which would report a blocked loop as 0 ms.
    const now = performance.now()
    const lateMs = intervalMs > 0 ? Math.max(0, now - lastSampleAt - intervalMs) : 0
    lastSampleAt = now
    const elu = performance.eventLoopUtilization(lastElu)
    lastElu = performance.eventLoopUtilization()
    const { rss, heapUsed, fdExhausted } = memory()
    const figures = {
      rss,
      heapUsed,
      heapLimit,
      // true while the process is out of descriptors (rss is then the last one read)
      fdExhausted,
      eventLoopDelayP99Ms: round(Math.max(lateMs, delay.count > 0 ? delay.percentile(99) / 1e6 : 0)),
      eventLoopDelayMaxMs: round(Math.max(lateMs, delay.count > 0 ? delay.max / 1e6 : 0)),
      eventLoopUtilization: round(elu.utilization),
      inFlight: tracker.inFlight,
      served: tracker.served,
      connections: tracker.connections,
      idleConnections: tracker.idle || 0,
      idleShed: tracker.shed || 0,
      slowBodyShed: tracker.slowBodyShed || 0,
      webSockets: tracker.upgraded || 0,
      // Log lines this worker could not write (its stdout/stderr reader went away, or stalled).
      logDropped: outputStatus().dropped,
      poolQueue: poolRegistry.queueDepth(),
      poolBusy: poolRegistry.busyThreads()
    }
    // What the primary's heap guard compares heapUsed with (heapLimit includes V8's young-generation reserve).
    figures.heapOldLimit = heapOldLimit
    delay.reset()
    return figures
  }

  return {
    sample,
    stop () { delay.disable() }
  }
}

/**
 * process.memoryUsage() reads RSS from /proc/self/stat, which on Node 20-24
 * needs a free descriptor: out of them (EMFILE, ENFILE) it throws, and a
 * throw here would kill the worker. Then the heap figure comes from V8 (no
 * descriptor) and the last RSS read stands in. Node 26 reads RSS without a
 * descriptor, so the condition is also probed directly: opening /dev/null
 * costs two system calls per heartbeat and fails exactly when the process
 * could not accept a connection or open a file either.
 */
function readMemory (onFdExhausted) {
  let lastRss = 0
  let told = false
  function exhausted (err) {
    const fdExhausted = Boolean(err) && (err.code === 'EMFILE' || err.code === 'ENFILE' || /\b(EMFILE|ENFILE)\b/.test(String(err.message)))
    if (fdExhausted && !told) {
      told = true
      if (onFdExhausted) onFdExhausted(err)
    }
    return fdExhausted
  }
  return function memory () {
    try {
      const usage = process.memoryUsage()
      lastRss = usage.rss
      return { rss: usage.rss, heapUsed: usage.heapUsed, fdExhausted: exhausted(probeDescriptor()) }
    } catch (err) {
      return { rss: lastRss, heapUsed: v8.getHeapStatistics().used_heap_size, fdExhausted: exhausted(err) }
    }
  }
}

/** @returns {Error|null} why a descriptor could not be opened now, or null */
function probeDescriptor () {
  let fd
  try {
    fd = fs.openSync(DEV_NULL, 'r')
  } catch (err) {
    return err
  }
  fs.closeSync(fd)
  return null
}

function round (value) {
  return Math.round(value * 100) / 100
}

module.exports = { createHealthSampler }
