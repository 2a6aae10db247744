'use strict'

/**
 * What a pool counts: task outcomes, thread replacements, and how long tasks
 * wait and run (the last 1024 of each, and a moving average of the run time
 * that sizes QueueFullError's Retry-After).
 */

const Samples = require('./samples')

class PoolMetrics {
  constructor () {
    this.completed = 0
    this.failed = 0
    this.cancelled = 0
    this.timedOut = 0
    /** Tasks refused because the queue was full. */
    this.rejected = 0
    /** Tasks whose thread died under them. */
    this.crashed = 0
    /** Threads started to replace one that crashed, timed out or was aborted. */
    this.replaced = 0
    this._wait = new Samples(1024)
    this._run = new Samples(1024)
    this._avgRunMs = 0
  }

  /**
   * A task was dispatched after waiting `ms` in the queue.
   * @param {number} ms
   */
  waited (ms) {
    this._wait.add(ms)
  }

  /**
   * A task ran for `ms` and its thread answered.
   * @param {number} ms
   */
  ran (ms) {
    this._run.add(ms)
    this._avgRunMs = this._avgRunMs === 0 ? ms : this._avgRunMs * 0.9 + ms * 0.1
  }

  /**
   * Seconds until a slot is likely free, from 1 to 60.
   * @param {number} outstanding tasks queued or running
   * @param {number} threads live threads
   * @returns {number}
   */
  retryAfter (outstanding, threads) {
    const seconds = Math.ceil((outstanding * this._avgRunMs) / Math.max(1, threads) / 1000)
    return Math.min(60, Math.max(1, seconds))
  }

  /**
   * The counters, then waitTime and runTime percentiles (PoolStats in types/index.d.ts).
   * @returns {object}
   */
  snapshot () {
    return {
      completed: this.completed,
      failed: this.failed,
      cancelled: this.cancelled,
      timedOut: this.timedOut,
      rejected: this.rejected,
      crashed: this.crashed,
      replaced: this.replaced,
      waitTime: this._wait.percentiles(),
      runTime: this._run.percentiles()
    }
  }
}

module.exports = PoolMetrics
