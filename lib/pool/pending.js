'use strict'

/**
 * The tasks a pool has accepted and not yet settled (queued or running). While
 * there is one, the process stays alive (pool threads are unref'd, so a
 * script that awaits a task would otherwise exit under it); when the last one
 * settles, a close() that waits for the drain hears it.
 */

const { MAX_TIMER_MS } = require('../errors')

const noop = () => {}

class Pending {
  constructor () {
    this.count = 0
    this._keepAlive = setInterval(noop, 1 << 30)
    this._keepAlive.unref()
    this._drained = null
  }

  /** A task was accepted. */
  add () {
    if (this.count++ === 0) this._keepAlive.ref()
  }

  /** A task settled. */
  settled () {
    if (--this.count === 0) {
      this._keepAlive.unref()
      if (this._drained !== null) this._drained()
    }
  }

  /**
   * Wait until no task is pending, for at most `timeoutMs`.
   * @param {number} timeoutMs
   * @returns {Promise<boolean>} true when drained, false at the deadline
   */
  drained (timeoutMs) {
    if (this.count === 0) return Promise.resolve(true)
    return new Promise((resolve) => {
      // Closing never fails: a deadline past what a timer can wait (it would
      // fire after 1 ms) means as long as a timer can wait.
      const timer = setTimeout(() => {
        this._drained = null
        resolve(false)
      }, Math.min(Math.max(0, timeoutMs), MAX_TIMER_MS))
      this._drained = () => {
        this._drained = null
        clearTimeout(timer)
        resolve(true)
      }
    })
  }

  /** Stop keeping the process alive, for good. */
  stop () {
    clearInterval(this._keepAlive)
  }
}

module.exports = Pending
