'use strict'

/**
 * Samples the worker's health for the primary: memory, event-loop delay
 * and utilisation, request counters and thread-pool queue depth.
 */

const v8 = require('v8')
const { monitorEventLoopDelay, performance } = require('perf_hooks')
const poolRegistry = require('../pool/registry')
const { oldGenerationLimit } = require('./heap-limit')

/**
 * @param {{ inFlight: number, served: number, connections: number }} tracker
 * @returns {{ sample: () => object, stop: () => void }}
 */
function createHealthSampler (tracker) {
  const delay = monitorEventLoopDelay({ resolution: 10 })
  delay.enable()
  let lastElu = performance.eventLoopUtilization()
  const heapOldLimit = oldGenerationLimit(v8.getHeapStatistics().heap_size_limit)
  const heapLimit = v8.getHeapStatistics().heap_size_limit

  function sample () {
    const memory = process.memoryUsage()
    const elu = performance.eventLoopUtilization(lastElu)
    lastElu = performance.eventLoopUtilization()
    const figures = {
      rss: memory.rss,
      heapUsed: memory.heapUsed,
      heapLimit,
      eventLoopDelayP99Ms: delay.count > 0 ? round(delay.percentile(99) / 1e6) : 0,
      eventLoopDelayMaxMs: delay.count > 0 ? round(delay.max / 1e6) : 0,
      eventLoopUtilization: round(elu.utilization),
      inFlight: tracker.inFlight,
      served: tracker.served,
      connections: tracker.connections,
      webSockets: tracker.upgraded || 0,
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

function round (value) {
  return Math.round(value * 100) / 100
}

module.exports = { createHealthSampler }
