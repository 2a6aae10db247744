'use strict'

/**
 * The rate-limit hit counters in Redis (bus.redis or the `redis` option):
 * every host's primary counts in the same keys, so a limit holds across the
 * fleet. One key per client, `<keyPrefix><store prefix><key>`, an integer
 * with the window as its TTL: the layout rate-limit-redis uses, so the two
 * can share (or migrate) counts. Each hit is one script, INCR then PEXPIRE
 * when the key has no TTL yet, atomic in Redis.
 *
 * Fail fast: the client has no offline queue and a command timeout, so
 * while Redis is unreachable a hit fails within `timeoutMs` and the worker's
 * store hands the error to express-rate-limit (passOnStoreError).
 */

const debug = require('debug')('clusterize:rate-limit')
const { whenReady } = require('./redis-ready')
const { HitBatch } = require('./rate-limit-hit-batch')

const INCREMENT = `
local hits = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return { hits, ttl }`

// A missing or expired key stays missing: DECR would create it with no TTL.
const DECREMENT = `
local hits = tonumber(redis.call('GET', KEYS[1]) or '0')
if hits > 0 then redis.call('DECR', KEYS[1]) end
return hits`

const GET = `
local hits = redis.call('GET', KEYS[1])
if not hits then return false end
return { tonumber(hits), redis.call('PTTL', KEYS[1]) }`

const SCAN_COUNT = 500

class RedisRateLimitCounters {
  /**
   * @param {{ client: object, commands: { send: (name: string, args: Array) => Promise<*> }, cluster: boolean }} connection
   *   the primary's app-state connection (./redis-client.js connectState): an ioredis Redis or
   *   Cluster client and where its per-request commands go
   * @param {{ keyPrefix?: string, now?: () => number }} [options]
   */
  constructor (connection, options) {
    options = options || {}
    const client = connection.client
    this.client = client
    this.commands = connection.commands
    this.keyPrefix = options.keyPrefix || ''
    this.now = options.now || Date.now
    if (typeof client.czRateIncrement !== 'function') {
      client.defineCommand('czRateIncrement', { numberOfKeys: 1, lua: INCREMENT })
      client.defineCommand('czRateDecrement', { numberOfKeys: 1, lua: DECREMENT })
      client.defineCommand('czRateGet', { numberOfKeys: 1, lua: GET })
    }
    // A turn's hits in one script call, except on a Cluster, where a script's keys must share a slot.
    this.hits = connection.cluster ? null : new HitBatch(client)
  }

  /**
   * @param {string} key
   * @param {number} windowMs
   * @returns {Promise<{ totalHits: number, resetTime: number }>}
   */
  async increment (key, windowMs) {
    await whenReady(this.client)
    const full = this.keyPrefix + key
    const [hits, ttl] = await (this.hits ? this.hits.increment(full, windowMs) : this.commands.send('czRateIncrement', [full, windowMs]))
    return { totalHits: Number(hits), resetTime: this.now() + Number(ttl) }
  }

  /** @param {string} key */
  async decrement (key) {
    await whenReady(this.client)
    await this.commands.send('czRateDecrement', [this.keyPrefix + key])
  }

  /**
   * @param {string} key
   * @returns {Promise<{ totalHits: number, resetTime: number }|undefined>}
   */
  async get (key) {
    await whenReady(this.client)
    const found = await this.commands.send('czRateGet', [this.keyPrefix + key])
    if (!found) return undefined
    const ttl = Number(found[1])
    return { totalHits: Number(found[0]), resetTime: this.now() + (ttl > 0 ? ttl : 0) }
  }

  /** @param {string} key */
  async resetKey (key) {
    await whenReady(this.client)
    await this.client.del(this.keyPrefix + key)
  }

  /**
   * Delete one store's keys (SCAN, never KEYS: Redis keeps answering others).
   * @param {string} prefix the store's prefix; '' deletes every counter under keyPrefix
   */
  async resetAll (prefix) {
    await whenReady(this.client)
    const match = escapeGlob(this.keyPrefix + (prefix || '')) + '*'
    const nodes = typeof this.client.nodes === 'function' ? this.client.nodes('master') : [this.client]
    let deleted = 0
    for (const node of nodes) {
      let cursor = '0'
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', match, 'COUNT', SCAN_COUNT)
        cursor = next
        // One DEL per key: keys of a Redis Cluster live in different slots.
        for (const key of keys) deleted += await node.del(key)
      } while (cursor !== '0')
    }
    debug('resetAll %s: %d keys deleted', match, deleted)
  }
}

/** A Redis glob that matches `text` literally. */
function escapeGlob (text) {
  return text.replace(/[*?[\]\\]/g, '\\$&')
}

module.exports = { RedisRateLimitCounters, escapeGlob, INCREMENT }
