'use strict'

/**
 * The tasks waiting for a thread, oldest first. A queued task that is
 * cancelled stays in the ring until it reaches the head (taking it out of the
 * middle would cost O(n)); `length` counts only the live ones.
 */

const Queue = require('./queue')

class TaskQueue {
  constructor () {
    this._ring = new Queue()
    /** Live (not yet settled) tasks in the queue. */
    this.length = 0
  }

  /** @param {object} t a Task (./records.js) */
  push (t) {
    this._ring.push(t)
    this.length++
  }

  /**
   * Take the oldest live task out of the queue.
   * @returns {object|undefined} a Task, or undefined when none is left
   */
  shift () {
    const ring = this._ring
    while (this.length > 0) {
      const t = ring.shift()
      if (t.done) continue
      this.length--
      return t
    }
    if (ring.length > 0) ring.clear() // only cancelled leftovers
    return undefined
  }

  /** A queued task was settled elsewhere (aborted): it no longer counts. */
  cancelled () {
    this.length--
  }
}

module.exports = TaskQueue
