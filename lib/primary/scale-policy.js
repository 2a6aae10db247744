'use strict'

/**
 * The decision of dynamic workers (`workers: { min, max }`), as a pure
 * function of what the primary saw: the workers' event-loop utilization
 * (ELU) from their heartbeats, the current count, the cap (max, never above
 * the CPU quota) and whether memory has room for one more worker.
 *
 * Hysteresis: one worker is added once the mean ELU has stayed at or above
 * `upElu` for `upAfterMs`, one is retired once it has stayed at or below
 * `downElu` for `downAfterMs`; every change starts both windows again, so
 * the next step is judged on what the cluster does with its new size (and a
 * new worker's boot does not count as load). Between the two thresholds
 * nothing happens. A count outside [min, cap] is brought back at once (the
 * quota shrank; a user scaled by hand below min).
 */

/**
 * @param {{ min: number, upElu: number, downElu: number, upAfterMs: number, downAfterMs: number }} options
 * @returns {{ decide: (sample: { now: number, count: number, elu: number[], cap: number, memoryRoom?: boolean }) => { action: 'up'|'down'|'hold', target: number, cause: 'load'|'cap'|'min', reason: string } }}
 */
function createScalePolicy (options) {
  const { min, upElu, downElu, upAfterMs, downAfterMs } = options
  /** When the mean ELU went (and stayed) high / low, or null. */
  let highSince = null
  let lowSince = null

  function restartWindows () {
    highSince = null
    lowSince = null
  }

  /**
   * @param {{ now: number, count: number, elu: number[], cap: number, memoryRoom?: boolean }} sample
   *   `elu`: one figure per ready worker (its last heartbeat's); `cap`: the most workers allowed now
   */
  function decide (sample) {
    const { now, count, elu } = sample
    const cap = Math.max(min, sample.cap)
    if (count > cap) {
      restartWindows()
      return { action: 'down', target: cap, cause: 'cap', reason: `the cap is ${cap} (workers.max or the CPU quota)` }
    }
    if (count < min) {
      restartWindows()
      return { action: 'up', target: min, cause: 'min', reason: `workers.min is ${min}` }
    }
    // A worker short of its first heartbeat does not count, and no figure means no judgement.
    if (elu.length === 0) return hold('no heartbeat yet')
    const mean = elu.reduce((sum, value) => sum + value, 0) / elu.length
    const shown = `mean event-loop utilization ${mean.toFixed(2)}`
    if (mean >= upElu) {
      lowSince = null
      if (highSince === null) highSince = now
      if (now - highSince < upAfterMs) return hold(`${shown} >= ${upElu} for ${now - highSince} ms`)
      if (count >= cap) return hold(`${shown} >= ${upElu}, but already at the cap (${cap})`)
      if (sample.memoryRoom === false) return hold(`${shown} >= ${upElu}, but memory has no room for one more worker`)
      restartWindows()
      return { action: 'up', target: count + 1, cause: 'load', reason: `${shown} >= ${upElu} for ${upAfterMs} ms` }
    }
    if (mean <= downElu) {
      highSince = null
      if (lowSince === null) lowSince = now
      if (now - lowSince < downAfterMs) return hold(`${shown} <= ${downElu} for ${now - lowSince} ms`)
      if (count <= min) return hold(`${shown} <= ${downElu}, already at workers.min (${min})`)
      restartWindows()
      return { action: 'down', target: count - 1, cause: 'load', reason: `${shown} <= ${downElu} for ${downAfterMs} ms` }
    }
    restartWindows()
    return hold(`${shown} between ${downElu} and ${upElu}`)

    function hold (reason) {
      return { action: 'hold', target: count, cause: 'load', reason }
    }
  }

  return { decide, restartWindows }
}

module.exports = { createScalePolicy }
