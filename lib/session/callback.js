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
    if (typeof cb !== 'function') return
    try {
      if (err) cb(err)
      else cb(null, value)
    } catch (appError) {
      // Thrown by the app, not by the store: rethrow it outside our promise
      // chains, once, unchanged.
      process.nextTick(function rethrowAppError () { throw appError })
    }
  }
}

module.exports = { callOnce }
