'use strict'

/**
 * Which singleton (if any) the running code belongs to: start() runs inside
 * this context, and so do the timers and callbacks it sets up. The pitfall
 * checks use it: a cron job scheduled inside a singleton runs on one worker.
 */

const { AsyncLocalStorage } = require('async_hooks')

const context = new AsyncLocalStorage()

/**
 * @template T
 * @param {string} name
 * @param {() => T} fn
 * @returns {T}
 */
function runInSingleton (name, fn) {
  return context.run({ name }, fn)
}

/** @returns {string|null} the singleton the current code runs in */
function currentSingleton () {
  const store = context.getStore()
  return store ? store.name : null
}

module.exports = { runInSingleton, currentSingleton }
