'use strict'

/**
 * The rate-limit hit counters the primary holds for every worker's
 * ClusterStore (one host, no Redis): fixed windows, as express-rate-limit's
 * MemoryStore counts them, so switching store keeps the limits' meaning.
 * A window starts at a key's first hit and lasts `windowMs`.
 *
 * Plain data in, plain data out: the service layer carries the calls.
 * Bounded: a flood of distinct keys (one per spoofed client address) stops
 * at `maxKeys` once the expired ones are swept; past that an increment is
 * refused with an error the worker's store passes to express-rate-limit,
 * whose `passOnStoreError` decides (the primary's memory is not the price).
 */

const debug = require('debug')('clusterize:rate-limit')
const { ClusterizeError } = require('../errors')
const { ExpiryHeap } = require('../session/expiry-heap')

const DEFAULT_MAX_KEYS = 500000

class RateLimitCounters {
  /**
   * @param {{ maxKeys?: number, now?: () => number, log?: object }} [options] now: the clock (tests);
   *   log: the primary's logger (one line the first time the bound refuses a key)
   */
  constructor (options) {
    options = options || {}
    this.maxKeys = options.maxKeys || DEFAULT_MAX_KEYS
    this.log = options.log || null
    /** New keys refused because the counters were full. */
    this.refused = 0
    this.now = options.now || Date.now
    /** key -> { hits, resetAt } */
    this.clients = new Map()
    // Entries may be stale (a key whose window restarted): checked when popped.
    this.expiries = new ExpiryHeap()
  }

  /**
   * Count one hit of `key` in a window of `windowMs`.
   * @param {string} key already prefixed by the store
   * @param {number} windowMs
   * @returns {{ totalHits: number, resetTime: number }} resetTime: epoch ms
   */
  increment (key, windowMs) {
    const now = this.now()
    let client = this.clients.get(key)
    if (client === undefined) {
      this.sweep(now)
      if (this.clients.size >= this.maxKeys) {
        if (++this.refused === 1 && this.log !== null) {
          this.log.warn(`rate limits: the primary's counters are full (${this.maxKeys} clients in their window): hits of new clients are refused ` +
            '(express-rate-limit\'s passOnStoreError decides whether they pass). Counted in /stats bounds.rateLimitKeysRefused and ' +
            'clusterize_primary_bound_reached_total{bound="rate_limit_keys"}; this is logged once. Use bus.redis to keep the counts in Redis.')
        }
        throw new ClusterizeError(`the primary's rate-limit counters are full (${this.maxKeys} clients in their window): ` +
          'this hit is not counted (express-rate-limit\'s passOnStoreError decides whether it passes)', 'ERR_CLUSTERIZE_RATE_LIMIT_FULL')
      }
      client = { hits: 0, resetAt: now + windowMs }
      this.clients.set(key, client)
      this.expiries.push(client.resetAt, key)
    } else if (client.resetAt <= now) {
      client.hits = 0
      client.resetAt = now + windowMs
      this.expiries.push(client.resetAt, key)
      // Keys that come back window after window leave a stale entry each time.
      if (this.expiries.size > 2 * this.clients.size + 1024) this.sweep(now)
    }
    client.hits++
    return { totalHits: client.hits, resetTime: client.resetAt }
  }

  /**
   * Undo one hit (express-rate-limit's skipFailedRequests / skipSuccessfulRequests).
   * @param {string} key
   */
  decrement (key) {
    const client = this.clients.get(key)
    if (client !== undefined && client.resetAt > this.now() && client.hits > 0) client.hits--
  }

  /**
   * @param {string} key
   * @returns {{ totalHits: number, resetTime: number }|undefined} undefined when the key has no live window
   */
  get (key) {
    const client = this.clients.get(key)
    if (client === undefined || client.resetAt <= this.now()) return undefined
    return { totalHits: client.hits, resetTime: client.resetAt }
  }

  /** @param {string} key */
  resetKey (key) {
    this.clients.delete(key)
  }

  /**
   * Forget every key that starts with `prefix` (one store's keys; '' = all).
   * @param {string} prefix
   */
  resetAll (prefix) {
    if (!prefix) {
      this.clients.clear()
      this.expiries = new ExpiryHeap()
      return
    }
    for (const key of this.clients.keys()) {
      if (key.startsWith(prefix)) this.clients.delete(key)
    }
  }

  /** Drop every key whose window ended (e.g. after resetKey left stale heap entries). */
  prune () {
    this.sweep(this.now())
    if (this.expiries.size > this.clients.size + 1024) {
      this.expiries = new ExpiryHeap()
      for (const [key, client] of this.clients) this.expiries.push(client.resetAt, key)
    }
  }

  /**
   * The live windows, to hand to another primary (lib/primary/handover.js).
   * @returns {Array<[string, number, number]>} [key, hits, resetAt]
   */
  exportEntries () {
    const now = this.now()
    const items = []
    for (const [key, client] of this.clients) {
      if (client.resetAt > now) items.push([key, client.hits, client.resetAt])
    }
    return items
  }

  /**
   * Windows another primary counted: a key counted here too keeps both counts.
   * @param {Array<[string, number, number]>} items as exportEntries() gives them
   */
  importEntries (items) {
    const now = this.now()
    for (const item of items) {
      if (!Array.isArray(item) || typeof item[0] !== 'string' || !Number.isInteger(item[1]) || !Number.isFinite(item[2]) || item[2] <= now) continue
      const [key, hits, resetAt] = item
      const client = this.clients.get(key)
      if (client !== undefined && client.resetAt > now) {
        client.hits += hits
        continue
      }
      this.clients.set(key, { hits, resetAt })
      this.expiries.push(resetAt, key)
    }
  }

  /** @returns {number} keys held (expired ones not yet swept included) */
  get size () {
    return this.clients.size
  }

  /**
   * Drop the keys whose window ended. Runs before a new key is added, so
   * memory follows the clients of the current windows, with no timer.
   * @param {number} now
   */
  sweep (now) {
    const heap = this.expiries
    let dropped = 0
    while (heap.size > 0 && heap.peekExpires() <= now) {
      const [at, key] = heap.pop()
      const client = this.clients.get(key)
      if (client !== undefined && client.resetAt === at) {
        this.clients.delete(key)
        dropped++
      }
    }
    if (dropped > 0) debug('swept %d expired rate-limit keys', dropped)
  }
}

module.exports = { RateLimitCounters, DEFAULT_MAX_KEYS }
