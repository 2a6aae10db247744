'use strict'

/**
 * Restart delay for a slot's n-th consecutive failure: exponential from
 * `backoffInitialMs`, capped at `backoffMaxMs`, with jitter (50-100% of
 * the step) so a fleet of crashing workers does not restart in lockstep.
 * @param {number} failures consecutive failures of this slot, >= 1
 * @param {{ backoffInitialMs: number, backoffMaxMs: number }} options
 * @param {() => number} [random]
 * @returns {number} milliseconds
 */
function backoffDelay (failures, options, random) {
  if (failures <= 1) return 0
  const step = Math.min(options.backoffMaxMs, options.backoffInitialMs * Math.pow(2, failures - 2))
  return Math.round(step * (0.5 + 0.5 * (random || Math.random)()))
}

/**
 * Restart delay while the crash-loop breaker is open: `backoffMaxMs`, with the same jitter.
 * @param {{ backoffMaxMs: number }} options
 * @param {() => number} [random]
 * @returns {number} milliseconds
 */
function cappedDelay (options, random) {
  return Math.round(options.backoffMaxMs * (0.5 + 0.5 * (random || Math.random)()))
}

/**
 * Counts failures in a sliding window; trips once `maxCrashes` failures
 * happen within `crashWindowMs`.
 */
class CrashWindow {
  constructor (options) {
    this.maxCrashes = options.maxCrashes
    this.windowMs = options.crashWindowMs
    this.times = []
  }

  /**
   * Record a failure.
   * @returns {boolean} true when the breaker trips
   */
  record (now) {
    now = now || Date.now()
    this.times.push(now)
    while (this.times.length > 0 && now - this.times[0] > this.windowMs) this.times.shift()
    return this.times.length >= this.maxCrashes
  }

  get count () {
    return this.times.length
  }
}

module.exports = { backoffDelay, cappedDelay, CrashWindow }
