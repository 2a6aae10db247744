'use strict'

/**
 * Calls sent and waiting for their answers: an id and a timer each, each
 * settled exactly once (by its answer, its timeout, or failAll). Shared by
 * the worker's service client (./remote.js) and the relay between the two
 * primaries of an upgrade (../primary/handover.js).
 */

/**
 * @template T
 * @param {{ unref?: boolean, onTake?: (call: T) => void }} [options] unref: a waiting call does
 *   not keep the process alive; onTake: runs as each call is settled, however it is
 */
function createPendingCalls (options) {
  const unref = Boolean(options && options.unref)
  const onTake = (options && options.onTake) || null
  /** @type {Map<number, T & { resolve: Function, reject: Function, timer: * }>} */
  const waiting = new Map()
  let nextId = 0

  /**
   * Take the call `id` out (its timer cleared), or undefined when it was
   * settled already (answered, timed out, or failed).
   * @param {number} id
   */
  function take (id) {
    const call = waiting.get(id)
    if (call === undefined) return undefined
    waiting.delete(id)
    clearTimeout(call.timer)
    if (onTake !== null) onTake(call)
    return call
  }

  return {
    take,

    /**
     * Register a call and give its id to `send`, synchronously.
     * @param {T} fields kept with the call (take() returns them)
     * @param {number} timeoutMs
     * @param {(call: T & { resolve: Function, reject: Function }) => void} onTimeout settles the call that timed out
     * @param {(id: number) => void} send writes the call
     * @returns {Promise<*>}
     */
    add (fields, timeoutMs, onTimeout, send) {
      const id = ++nextId
      return new Promise(function track (resolve, reject) {
        const call = Object.assign(fields, { resolve, reject, timer: null })
        call.timer = setTimeout(function timedOut () {
          if (take(id) !== undefined) onTimeout(call)
        }, timeoutMs)
        if (unref) call.timer.unref()
        waiting.set(id, call)
        send(id)
      })
    },

    /**
     * Settle every waiting call with `fail(call)`.
     * @param {(call: T & { resolve: Function, reject: Function }) => void} fail
     */
    failAll (fail) {
      for (const id of Array.from(waiting.keys())) fail(take(id))
    },

    get size () {
      return waiting.size
    }
  }
}

module.exports = { createPendingCalls }
