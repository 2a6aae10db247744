'use strict'

/**
 * How much of the V8 heap a worker's old generation may fill before V8
 * aborts the process: the figure the primary's heap guard compares with.
 */

const { nodeFlags, flagMB } = require('../node-flags')

const MB = 1024 * 1024
/**
 * V8's default largest semi-space on 64-bit, by Node major: the young generation reserves
 * three of them. Measured as (heap_size_limit - --max-old-space-size) / 3: 16 MB on Node 20
 * and 22, 64 MB on Node 24, 32 MB on Node 26. clusterize's workers get 16 MB unless the app
 * sets its own (option maxSemiSpaceMB, lib/primary/worker-flags.js), so this only matters
 * with maxSemiSpaceMB: 0.
 */
const NODE_MAJOR = Number(process.versions.node.split('.')[0])
const DEFAULT_SEMI_SPACE_MB = NODE_MAJOR >= 26 ? 32 : NODE_MAJOR >= 24 ? 64 : 16

/**
 * heap_size_limit minus the young generation's reserve. heapUsed never
 * reaches heap_size_limit (measured at the abort: 0.83 of it with a 256 MB
 * heap), so a ratio of heap_size_limit would never fire on small heaps.
 * From --max-old-space-size when given (exact), else the limit minus three
 * semi-spaces (--max-semi-space-size or V8's default).
 * @param {number} heapLimit v8 heap_size_limit
 * @param {string[]} [flags] node flags (process.execArgv and NODE_OPTIONS by default)
 * @returns {number} bytes
 */
function oldGenerationLimit (heapLimit, flags) {
  flags = flags || nodeFlags(process.execArgv, process.env.NODE_OPTIONS)
  const oldSpace = flagMB(flags, 'max-old-space-size')
  if (oldSpace > 0 && oldSpace * MB < heapLimit) return oldSpace * MB
  const reserve = 3 * (flagMB(flags, 'max-semi-space-size') || DEFAULT_SEMI_SPACE_MB) * MB
  return heapLimit - Math.min(reserve, heapLimit / 4)
}

module.exports = { oldGenerationLimit }
