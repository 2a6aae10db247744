'use strict'

/**
 * Run a latency measurement under SCHED_FIFO (`chrt -f -a -p 1`), so that
 * other work on a shared machine cannot make the measured processes wait for
 * a core: what is left is the latency of the code and the IPC, not of the
 * machine's load. Only for short, light phases (a few % CPU): a process
 * spinning under SCHED_FIFO would starve everything else on its core.
 * Needs root or CAP_SYS_NICE and chrt (util-linux).
 */

const { execFileSync } = require('child_process')

/**
 * Put `pids` (every thread of each) under SCHED_FIFO priority 1 ('fifo') or
 * back to SCHED_OTHER ('other').
 * @param {number[]} pids
 * @param {'fifo'|'other'} policy
 * @returns {boolean} false when chrt failed (no permission, no chrt, a
 *   process gone): none is left under SCHED_FIFO, the measurement runs under
 *   the normal scheduler
 */
function setScheduler (pids, policy) {
  const done = []
  try {
    for (const pid of pids) {
      execFileSync('chrt', policy === 'fifo' ? ['-f', '-a', '-p', '1', String(pid)] : ['-o', '-a', '-p', '0', String(pid)], { stdio: 'ignore' })
      done.push(pid)
    }
    return true
  } catch {
    // All or none: never leave some processes under SCHED_FIFO.
    if (policy === 'fifo' && done.length > 0) setScheduler(done, 'other')
    return false
  }
}

/**
 * `await underFifo(pids, fn)`: run fn with `pids` under SCHED_FIFO, always
 * restoring SCHED_OTHER after.
 * @template T
 * @param {number[]} pids
 * @param {() => Promise<T>} fn
 * @returns {Promise<{ value: T, fifo: boolean }>}
 */
async function underFifo (pids, fn) {
  const fifo = setScheduler(pids, 'fifo')
  try {
    return { value: await fn(), fifo }
  } finally {
    if (fifo) setScheduler(pids, 'other')
  }
}

module.exports = { setScheduler, underFifo }
