'use strict'

/**
 * How our stores call express-session's callbacks: exactly once, and outside
 * any promise chain or try/catch of ours. An exception the app throws inside
 * a callback then surfaces as itself (an uncaughtException, as with
 * express-session's MemoryStore) instead of being caught by the store and fed
 * back into the same callback as a store error, or becoming an
 * unhandledRejection.
 */

const debug = require('debug')('clusterize:session')

const SUCCEEDED = 1
const FAILED = 2

/**
 * The outcome of the innermost of a store's callbacks running right now.
 * express-session ends the response from inside its store callback, so the
 * response holder (./hold-response.js), given the store's outcome, reads it
 * to know synchronously whether a store error is still on its way.
 */
class CallbackOutcome {
  constructor () {
    /** 0: no callback of this store is running; else SUCCEEDED or FAILED. */
    this.answering = 0
  }

  /**
   * True while one of the store's callbacks runs for an operation that
   * succeeded: a response ended from there has no store error coming after it.
   * @returns {boolean}
   */
  answeredSuccessfully () {
    return this.answering === SUCCEEDED
  }
}

/**
 * Wrap a store callback so it runs at most once and its exceptions escape.
 * @param {Function|undefined} cb the caller's callback (may be absent)
 * @param {string} op the store operation, for tracing
 * @param {CallbackOutcome} [outcome] the store's, noted while the callback runs
 * @returns {(err: Error|null, value?: *) => void}
 */
function callOnce (cb, op, outcome) {
  let called = false
  return function answerOnce (err, value) {
    if (called) {
      debug('%s: callback already answered, later answer dropped: %s', op, err && err.message)
      return
    }
    called = true
    try {
      answer(cb, err, value, outcome)
    } catch (appError) {
      // Thrown by the app, not by the store: rethrow it outside our promise
      // chains, once, unchanged.
      process.nextTick(function rethrowAppError () { throw appError })
    }
  }
}

/**
 * Call a store callback now, noting its outcome on the store's `outcome` while it runs.
 * @param {Function|undefined} cb
 * @param {Error|null|undefined} err
 * @param {*} [value]
 * @param {CallbackOutcome} [outcome]
 */
function answer (cb, err, value, outcome) {
  if (typeof cb !== 'function') return
  if (outcome === undefined) {
    if (err) cb(err)
    else cb(null, value)
    return
  }
  const outer = outcome.answering
  outcome.answering = err ? FAILED : SUCCEEDED
  try {
    if (err) cb(err)
    else cb(null, value)
  } finally {
    outcome.answering = outer
  }
}

module.exports = { callOnce, answer, CallbackOutcome }
