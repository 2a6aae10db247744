'use strict'

/**
 * Samples the worker's health for the primary: memory, event-loop delay
 * and utilisation, request counters and thread-pool queue depth.
 */

const v8 = require('v8')
const { monitorEventLoopDelay, performance } = require('perf_hooks')
const poolRegistry = require('../pool/registry')

/**
 * @param {{ inFlight: number, served: number, connections: number }} tracker
 * @returns {{ sample: () => object, stop: () => void }}
 */
function createHealthSampler (tracker) {
  const delay = monitorEventLoopDelay({ resolution: 10 })
  delay.enable()
  let lastElu = performance.eventLoopUtilization()
  const heapLimit = v8.getHeapStatistics().heap_size_limit
  const heapOldLimit = oldGenerationLimit(heapLimit)

  function sample () {
    const memory = process.memoryUsage()
    const elu = performance.eventLoopUtilization(lastElu)
    lastElu = performance.eventLoopUtilization()
    const figures = {
      rss: memory.rss,
      heapUsed: memory.heapUsed,
      heapLimit,
      heapOldLimit,
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
    delay.reset()
    return figures
  }

  return {
    sample,
    stop () { delay.disable() }
  }
}

const MB = 1024 * 1024
/** V8's default largest semi-space on 64-bit (Node 20-24): the young generation reserves three of them. */
const DEFAULT_SEMI_SPACE_MB = 16

/**
 * The heap the old generation may fill before V8 aborts: heap_size_limit
 * minus the young generation's reserve. heapUsed never reaches
 * heap_size_limit (measured at the abort: 0.83 of it with a 256 MB heap),
 * so a ratio of heap_size_limit would never fire on small heaps.
 * From --max-old-space-size when given (exact), else the limit minus three
 * semi-spaces (--max-semi-space-size or V8's default).
 * @param {number} heapLimit v8 heap_size_limit
 * @returns {number} bytes
 */
function oldGenerationLimit (heapLimit) {
  const flags = process.execArgv.concat((process.env.NODE_OPTIONS || '').split(/\s+/))
  const oldSpace = flagMB(flags, 'max-old-space-size')
  if (oldSpace > 0 && oldSpace * MB < heapLimit) return oldSpace * MB
  const reserve = 3 * (flagMB(flags, 'max-semi-space-size') || DEFAULT_SEMI_SPACE_MB) * MB
  return heapLimit - Math.min(reserve, heapLimit / 4)
}

/** The last `--name=N` (or `--name_with_underscores=N`) among V8 flags, in MB; 0 if absent. */
function flagMB (flags, name) {
  const pattern = new RegExp('^--' + name.replace(/-/g, '[-_]') + '=(\\d+)$')
  let value = 0
  for (const flag of flags) {
    const match = pattern.exec(flag)
    if (match) value = Number(match[1])
  }
  return value
}

function round (value) {
  return Math.round(value * 100) / 100
}

module.exports = { createHealthSampler }
