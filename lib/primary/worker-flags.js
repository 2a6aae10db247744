'use strict'

/**
 * The node flags clusterize forks its workers with: the primary's own (as
 * node:cluster does), plus V8's young-generation size when the app set none.
 *
 * Why a semi-space bound. A scavenge (V8's young-generation GC) stops the
 * worker's event loop for a time that grows with the semi-space, and Node 24
 * raised V8's default largest semi-space from 16 MB (Node 20 and 22) to 64 MB
 * (Node 26: 32 MB), measured with --max-old-space-size given: heap_size_limit
 * minus it is three semi-spaces. On a 2-core box at saturation a worker's
 * scavenge then took about 10 ms, every in-flight request of that worker
 * waited for it, and it was the longest wait in a saturated p99 (bench/README.md,
 * "Garbage collection pauses"). With 16 MB, Node 22's size, the pauses are
 * about a third as long and four times as many, for about the same GC time;
 * wrk's p99 about halved, req/s moved by 0.90x-1.03x (bench/sessions.js
 * --gc-rows), and a worker held about 80 MB less after the load.
 */

const debug = require('debug')('clusterize:primary')
const { nodeFlags, hasFlag } = require('../node-flags')

/**
 * @param {string[]} execArgv the flags workers would get (node:cluster's setting, else the primary's own)
 * @param {string|undefined} nodeOptions NODE_OPTIONS, which workers inherit with the environment
 * @param {number} maxSemiSpaceMB clusterize() option; 0 leaves V8's default
 * @returns {string[]} the flags to fork workers with
 */
function workerExecArgv (execArgv, nodeOptions, maxSemiSpaceMB) {
  if (!(maxSemiSpaceMB > 0)) return execArgv
  if (hasFlag(nodeFlags(execArgv, nodeOptions), 'max-semi-space-size')) {
    debug('the app sets --max-semi-space-size itself: option maxSemiSpaceMB not applied')
    return execArgv
  }
  return execArgv.concat(`--max-semi-space-size=${maxSemiSpaceMB}`)
}

module.exports = { workerExecArgv }
