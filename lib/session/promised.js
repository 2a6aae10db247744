'use strict'

/**
 * express-session always passes a callback, but apps and tools call stores
 * directly (connect-redis and MemoryStore-style code often `await store.get()`):
 * without a callback an operation returns a promise, with the same semantics.
 */

/**
 * Run store[op](...args, cb) and settle a promise with its answer.
 * @param {object} store
 * @param {string} op a Store method that takes a node-style callback last
 * @param {Array} args the operation's arguments before the callback
 * @returns {Promise<*>}
 */
function promised (store, op, args) {
  return new Promise(function run (resolve, reject) {
    store[op](...args, function answered (err, value) {
      if (err) reject(err)
      else resolve(value)
    })
  })
}

module.exports = { promised }
