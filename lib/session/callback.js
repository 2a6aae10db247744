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
 * The outcome of the innermost of our store callbacks running right now (0: none is running).
 * express-session ends the response from inside its store callback, so the response holder
 * reads this to know, synchronously, whether a store error is still on its way.
 */
let answering = 0

/**
 * Wrap a store callback so it runs at most once and its exceptions escape.
 * @param {Function|undefined} cb the caller's callback (may be absent)
 * @param {string} op the store operation, for tracing
 * @returns {(err: Error|null, value?: *) => void}
 */
function callOnce (cb, op) {
  let called = false
  return function answerOnce (err, value) {
    if (called) {
      debug('%s: callback already answered, later answer dropped: %s', op, err && err.message)
      return
    }
    called = true
    try {
      answer(cb, err, value)
    } catch (appError) {
      // Thrown by the app, not by the store: rethrow it outside our promise
      // chains, once, unchanged.
      process.nextTick(function rethrowAppError () { throw appError })
    }
  }
}

/**
 * Call a store callback now, noting its outcome while it runs (see answeredSuccessfully()).
 * @param {Function|undefined} cb
 * @param {Error|null|undefined} err
 * @param {*} [value]
 */
function answer (cb, err, value) {
  if (typeof cb !== 'function') return
  const outer = answering
  answering = err ? FAILED : SUCCEEDED
  try {
    if (err) cb(err)
    else cb(null, value)
  } finally {
    answering = outer
  }
}

/**
 * True while one of our stores' callbacks runs for an operation that succeeded: a response ended
 * from there has no store error coming after it.
 * @returns {boolean}
 */
function answeredSuccessfully () {
  return answering === SUCCEEDED
}

module.exports = { callOnce, answer, answeredSuccessfully }
