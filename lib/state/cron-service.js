'use strict'

/**
 * The primary-side run claims behind node-cron's `distributed: true`: node-cron
 * asks its run coordinator `shouldRun(key, ttlMs)` for each scheduled fire,
 * the key naming the task and the fire's time (`<name>:<ISO time>`). The
 * first worker to claim a key runs that fire; the key is remembered for
 * ttlMs, so the others (asking a moment later) are told no. With bus.redis
 * the claim is a SET NX PX in Redis: one run per fire in the whole fleet.
 */

const { ClusterizeError } = require('../errors')
const { ExpiryHeap } = require('../session/expiry-heap')
const { whenReady } = require('./redis-ready')

const SERVICE = 'cron'
const CRON_OP = Object.freeze({ CLAIM: 'claim' })
const MAX_KEY_LENGTH = 512
const MAX_TTL_MS = 24 * 3600 * 1000
const DEFAULT_MAX_CLAIMS = 100000

/** Claims of one host. */
class RunClaims {
  /** @param {{ maxClaims?: number, now?: () => number }} [options] */
  constructor (options) {
    options = options || {}
    this.now = options.now || Date.now
    this.maxClaims = options.maxClaims || DEFAULT_MAX_CLAIMS
    this.claims = new Map()
    this.expiries = new ExpiryHeap()
  }

  /**
   * @param {string} key
   * @param {number} ttlMs
   * @returns {boolean} true for the first claim of a key (within its ttl)
   */
  claim (key, ttlMs) {
    const now = this.now()
    this.sweep(now)
    const until = this.claims.get(key)
    if (until !== undefined && until > now) return false
    if (this.claims.size >= this.maxClaims) {
      // Fail closed: node-cron skips the fire (its 'coordinator-error') rather than run it twice.
      throw new ClusterizeError(`cron run claims are full (${this.maxClaims} fires within their ttl)`, 'ERR_CLUSTERIZE_CRON_FULL')
    }
    this.claims.set(key, now + ttlMs)
    this.expiries.push(now + ttlMs, key)
    return true
  }

  /** @returns {Array<[string, number]>} [key, until] of the claims still held */
  exportClaims () {
    this.sweep(this.now())
    return Array.from(this.claims)
  }

  /** @param {Array<[string, number]>} items claims another primary made */
  importClaims (items) {
    const now = this.now()
    for (const item of items) {
      if (!Array.isArray(item) || typeof item[0] !== 'string' || !Number.isFinite(item[1]) || item[1] <= now) continue
      const held = this.claims.get(item[0])
      if (held !== undefined && held >= item[1]) continue
      this.claims.set(item[0], item[1])
      this.expiries.push(item[1], item[0])
    }
  }

  sweep (now) {
    while (this.expiries.size > 0 && this.expiries.peekExpires() <= now) {
      const [at, key] = this.expiries.pop()
      if (this.claims.get(key) === at) this.claims.delete(key)
    }
  }
}

/** Claims in Redis, shared by every host. */
class RedisRunClaims {
  /** @param {object} client @param {string} keyPrefix */
  constructor (client, keyPrefix) {
    this.client = client
    this.keyPrefix = keyPrefix
  }

  async claim (key, ttlMs) {
    await whenReady(this.client)
    return (await this.client.set(this.keyPrefix + key, String(process.pid), 'PX', ttlMs, 'NX')) === 'OK'
  }
}

/**
 * @param {RunClaims|RedisRunClaims} claims
 * @returns {Record<string, Function>}
 */
function cronHandlers (claims) {
  return {
    [CRON_OP.CLAIM]: function claim (data) {
      const key = data && data.key
      const ttlMs = data && data.ttlMs
      if (typeof key !== 'string' || key === '' || key.length > MAX_KEY_LENGTH) throw badRequest('key')
      if (!Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > MAX_TTL_MS) throw badRequest('ttlMs')
      return claims.claim(key, ttlMs)
    }
  }
}

function badRequest (field) {
  return new ClusterizeError(`cron claim: bad ${field}`, 'ERR_CLUSTERIZE_CRON_REQUEST')
}

/** The service of lib/services/list.js. */
const cronService = {
  name: SERVICE,
  handover: { crosses: 'handedOver', what: 'the fires already claimed (without Redis): a fire claimed by an old worker does not run again on a new one' },
  start: function startCronService (context) {
    const { lazyStateBackend } = require('./redis-client')
    const claims = lazyStateBackend(context, (connection, namespace) => (connection ? new RedisRunClaims(connection.client, namespace + ':cron:') : new RunClaims()))
    return {
      requests: {
        [CRON_OP.CLAIM]: function claim (data) { return cronHandlers(claims.current())[CRON_OP.CLAIM](data) }
      },
      handover: {
        export () {
          if (claims.shared) return undefined
          const built = claims.built()
          return built === null ? [] : built.exportClaims()
        },
        import (items) {
          const built = claims.current()
          if (typeof built.importClaims === 'function') built.importClaims(items)
        }
      },
      close: () => claims.close()
    }
  }
}

module.exports = { cronService, cronHandlers, RunClaims, RedisRunClaims, CRON_OP, SERVICE }
