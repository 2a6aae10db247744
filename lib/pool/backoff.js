'use strict'

/**
 * How a pool answers threads that fail at startup (a bad `setup` module, a
 * resourceLimits too small to boot): start the next one after 50 ms, 100 ms,
 * 200 ms... and give up after `maxFailures` in a row, so a broken setup does
 * not spin up threads in a loop.
 */

class StartupBackoff {
  /** @param {number} maxFailures */
  constructor (maxFailures) {
    this.failures = 0
    this._maxFailures = maxFailures
    this._timer = null
  }

  /** A thread became ready: the streak of failures ends. */
  reset () {
    this.failures = 0
  }

  /**
   * A thread failed at startup. Calls `respawn` after the backoff, or returns
   * false when this failure reached the limit (then it calls nothing).
   * @param {() => void} respawn
   * @returns {boolean}
   */
  failed (respawn) {
    this.failures++
    if (this.failures >= this._maxFailures) return false
    const delay = 50 * 2 ** (this.failures - 1)
    this._timer = setTimeout(() => {
      this._timer = null
      respawn()
    }, delay)
    this._timer.unref()
    return true
  }

  /** Call no pending respawn. */
  cancel () {
    if (this._timer !== null) clearTimeout(this._timer)
    this._timer = null
  }
}

module.exports = StartupBackoff
