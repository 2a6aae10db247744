'use strict'

/**
 * ClusterStore: a store for express-rate-limit (its Store interface, v7 and
 * v8) whose counts the primary holds, so a limit of 10 is 10 for the whole
 * cluster, not 10 per worker; with Redis, for the whole fleet.
 *
 *   const { ClusterStore } = require('clusterize-express/rate-limit')
 *   app.use(rateLimit({ windowMs: 60000, limit: 10, store: new ClusterStore() }))
 *
 * Every call is one request to the primary's rate-limit service, bounded by
 * `timeoutMs`: a primary (or Redis) that does not answer makes the call fail,
 * and express-rate-limit's `passOnStoreError` decides what the request gets
 * (false, its default: an error response; true: the request passes
 * unlimited). It never waits longer than that.
 */

const debug = require('debug')('clusterize:rate-limit')
const { ClusterizeError, ClusterizeOptionError } = require('../errors')
const { serviceClient } = require('./client')
const { rateLimitService, RATE_OP, MAX_KEY_LENGTH } = require('./rate-limit-service')

const DEFAULT_TIMEOUT_MS = 1000
// Stores without a prefix are numbered in the order the app builds them,
// the same order in every worker, so limiter #2 of one worker counts with
// limiter #2 of the others and never with limiter #1.
let unnamed = 0

class ClusterStore {
  /**
   * @param {object} [options]
   * @param {string} [options.prefix] namespace of this limiter's keys, shared by every worker
   *   (and host); default `rl:<n>:`, n counting the stores built without a prefix in this process
   * @param {number} [options.timeoutMs=1000] bound on one call to the primary
   * @param {object} [options.client] internal: the service client (tests)
   */
  constructor (options) {
    options = options || {}
    if (options.prefix !== undefined && (typeof options.prefix !== 'string' || options.prefix.length > MAX_KEY_LENGTH / 2)) {
      throw new ClusterizeOptionError(`ClusterStore: option "prefix" must be a string of at most ${MAX_KEY_LENGTH / 2} characters`, 'prefix')
    }
    const timeoutMs = options.timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : options.timeoutMs
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 60000) {
      throw new ClusterizeOptionError('ClusterStore: option "timeoutMs" must be an integer from 1 to 60000, got ' + String(timeoutMs), 'timeoutMs')
    }
    /** express-rate-limit reads it: keys are `${prefix}${key}` in its double-count check. */
    this.prefix = options.prefix === undefined ? `rl:${++unnamed}:` : options.prefix
    /** Counts are shared with other instances (every worker's), so not local. */
    this.localKeys = false
    this.timeoutMs = timeoutMs
    this.windowMs = 60000
    this.client = options.client || null
  }

  /**
   * Called by express-rate-limit with its options.
   * @param {{ windowMs: number }} options
   */
  init (options) {
    if (options && Number.isInteger(options.windowMs) && options.windowMs > 0) this.windowMs = options.windowMs
  }

  /**
   * @param {string} key
   * @returns {Promise<{ totalHits: number, resetTime: Date }>}
   */
  async increment (key) {
    const hit = await this.call(RATE_OP.INCREMENT, { key: this.prefix + key, windowMs: this.windowMs })
    return { totalHits: hit.totalHits, resetTime: new Date(hit.resetTime) }
  }

  /** @param {string} key */
  async decrement (key) {
    await this.call(RATE_OP.DECREMENT, { key: this.prefix + key })
  }

  /**
   * @param {string} key
   * @returns {Promise<{ totalHits: number, resetTime: Date }|undefined>}
   */
  async get (key) {
    const hit = await this.call(RATE_OP.GET, { key: this.prefix + key })
    if (hit === undefined || hit === null) return undefined
    return { totalHits: hit.totalHits, resetTime: new Date(hit.resetTime) }
  }

  /** @param {string} key */
  async resetKey (key) {
    await this.call(RATE_OP.RESET_KEY, { key: this.prefix + key })
  }

  /** Reset this limiter's keys in the whole cluster (fleet). */
  async resetAll () {
    await this.call(RATE_OP.RESET_ALL, { prefix: this.prefix })
  }

  /** Nothing to close: the primary holds the counts. */
  async shutdown () {}

  /**
   * One request to the service, failing after timeoutMs at the latest.
   * @param {string} op
   * @param {object} data
   */
  call (op, data) {
    let client
    try {
      if (this.client === null) this.client = serviceClient(rateLimitService)
      client = this.client
    } catch (err) {
      return Promise.reject(err)
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        debug('%s %s: no answer within %d ms', op, data.key || data.prefix, this.timeoutMs)
        reject(new ClusterizeError(`ClusterStore: the rate-limit counts did not answer within ${this.timeoutMs} ms`, 'ERR_CLUSTERIZE_RATE_LIMIT_TIMEOUT'))
      }, this.timeoutMs)
      timer.unref()
      Promise.resolve().then(() => client.request(op, data, { timeoutMs: this.timeoutMs })).then(function answered (value) {
        clearTimeout(timer)
        resolve(value)
      }, function failed (err) {
        clearTimeout(timer)
        reject(err)
      })
    })
  }
}

module.exports = { ClusterStore, DEFAULT_TIMEOUT_MS }
