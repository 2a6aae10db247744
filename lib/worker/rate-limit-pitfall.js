'use strict'

/**
 * express-rate-limit's default MemoryStore under several workers: each
 * worker counts alone, so a limit of 10 lets 10 x N through. Treated like
 * express-session's MemoryStore (./pitfalls.js): one warning naming the fix;
 * and with `defaultRateLimitStore: 'cluster'` (CLI: --rate-limit cluster)
 * every MemoryStore the app's express-rate-limit builds (the default store of
 * rateLimit() without `store`) counts in the cluster instead.
 *
 * express-rate-limit has no public way to change its default store, so this
 * watches MemoryStore's constructor the way ./pitfalls.js watches
 * express-session's: MemoryStore assigns `this.localKeys` when it is built; a
 * setter on its prototype sees that and turns it back into an ordinary own
 * property, or, with the option, makes the new instance a ClusterStore
 * (its methods and prefix; `rl:<n>:` by construction order, the same in
 * every worker). Both the CommonJS and the ESM build are watched.
 */

const debug = require('debug')('clusterize:rate-limit')
const { packageCopies, appDeclares } = require('../package-copies')

const kWatched = Symbol.for('clusterize.rateLimitMemoryStoreWatched')
const STORE_METHODS = ['init', 'get', 'increment', 'decrement', 'resetKey', 'resetAll', 'shutdown']
let reported = false
/** What the watch does now (one per process: the last call's). */
let settings = null

function memoryStoreWarning (workers) {
  return `express-rate-limit's default MemoryStore counts in each worker: with ${workers} workers a limit of N lets up to ${workers} x N through. ` +
    "Use rateLimit({ store: new ClusterStore() }) (require('clusterize-express/rate-limit')), " +
    "or start with `clusterize app.js --rate-limit cluster` (option defaultRateLimitStore: 'cluster') to make the default store the cluster store"
}

/**
 * The express-rate-limit builds the app can load (CommonJS and ESM), loaded.
 * @param {string} appDir
 * @returns {Promise<Array<{ MemoryStore: Function }>>}
 */
function rateLimitCopies (appDir) {
  return packageCopies('express-rate-limit', appDir, (exports) => exports.MemoryStore)
}

/**
 * Before the app loads: warn on (or, with useCluster, replace) the
 * MemoryStores its express-rate-limit builds while several workers serve.
 * @param {{ warn: Function, info: Function }} log
 * @param {number} workers
 * @param {string} appDir
 * @param {{ useCluster?: boolean, createStore?: () => object }} [options]
 *   createStore: builds the ClusterStore an instance becomes
 * @returns {Promise<number>} how many express-rate-limit copies are watched
 */
async function watchRateLimitStores (log, workers, appDir, options) {
  options = options || {}
  if (!(workers > 1) && !options.useCluster) return 0
  settings = { log, workers, useCluster: Boolean(options.useCluster), createStore: options.createStore || defaultClusterStore }
  // Asked for by name (--rate-limit cluster): hooked even when only a dependency of the app's uses it.
  if (!settings.useCluster && !appDeclares('express-rate-limit', appDir)) return 0
  const copies = await rateLimitCopies(appDir)
  for (const copy of copies) {
    const proto = copy.MemoryStore.prototype
    if (proto[kWatched]) continue
    proto[kWatched] = true
    Object.defineProperty(proto, 'localKeys', {
      configurable: true,
      get () { return undefined },
      set: function localKeysOfNewMemoryStore (value) {
        if (settings !== null && settings.useCluster) return becomeClusterStore(this, settings.createStore())
        Object.defineProperty(this, 'localKeys', { value, writable: true, enumerable: true, configurable: true })
        if (settings !== null && !reported && settings.workers > 1) {
          reported = true
          settings.log.warn(memoryStoreWarning(settings.workers), { pid: process.pid })
        }
      }
    })
  }
  return copies.length
}

function defaultClusterStore () {
  const { ClusterStore } = require('../state/rate-limit-store')
  return new ClusterStore()
}

/** Make a MemoryStore instance behave as `store`: its Store methods, prefix and localKeys. */
function becomeClusterStore (instance, store) {
  for (const method of STORE_METHODS) {
    Object.defineProperty(instance, method, { value: store[method].bind(store), writable: true, configurable: true })
  }
  Object.defineProperty(instance, 'localKeys', { value: false, writable: true, enumerable: true, configurable: true })
  Object.defineProperty(instance, 'prefix', { value: store.prefix, writable: true, enumerable: true, configurable: true })
  debug('a MemoryStore became a ClusterStore (prefix %s)', store.prefix)
}

/** Stop watching (MemoryStores behave as built) and warn again next time: tests. */
function unwatchRateLimitStores () {
  reported = false
  settings = null
}

module.exports = { watchRateLimitStores, memoryStoreWarning, rateLimitCopies, unwatchRateLimitStores }
