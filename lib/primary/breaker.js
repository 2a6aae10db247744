'use strict'

/**
 * The crash-loop breaker. Failures (crash, boot failure, hang) are counted
 * per generation of code in a sliding window: `restart.maxCrashes` of them
 * within `restart.crashWindowMs` trip that generation's breaker, once.
 * Counting per generation keeps a broken deploy from using up the budget of
 * the code that serves, and gives every new generation a budget of its own.
 * What a trip changes (the capped backoff, /ready) is the supervisor's call.
 */

const debug = require('debug')('clusterize:breaker')
const { CrashWindow } = require('./backoff')

class Breaker {
  /**
   * @param {{ maxCrashes: number, crashWindowMs: number }} options config.restart
   */
  constructor (options) {
    this.options = options
    /** @type {Map<number, CrashWindow>} by generation */
    this.windows = new Map()
  }

  /**
   * Count one failure of a worker that ran `generation`.
   * @param {number} generation
   * @param {number} [now] Date.now() by default
   * @returns {{ generation: number, crashes: number, windowMs: number, maxCrashes: number }|null}
   *   the trip, the first time this generation's failures exceed the budget; null otherwise
   */
  recordFailure (generation, now) {
    let window = this.windows.get(generation)
    if (!window) {
      window = new CrashWindow(this.options)
      this.windows.set(generation, window)
    }
    if (window.tripped || !window.record(now)) return null
    window.tripped = true
    debug('generation %d tripped the breaker: %d failures within %d ms', generation, window.count, this.options.crashWindowMs)
    return { generation, crashes: window.count, windowMs: this.options.crashWindowMs, maxCrashes: this.options.maxCrashes }
  }

  /**
   * The generation's code stays up again: a fresh budget, so a later crash loop trips it again.
   * @param {number} generation
   */
  reset (generation) {
    this.windows.delete(generation)
  }
}

module.exports = { Breaker }
