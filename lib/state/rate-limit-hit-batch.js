'use strict'

/**
 * The rate-limit hits of one event-loop turn as one script call on one Redis
 * node: every key's INCR (and PEXPIRE on a new key) in one EVALSHA, answered
 * per hit. A primary takes the hits of every worker on its host, many in
 * one turn under load; one call for all of them spares ioredis and Redis a
 * command's encoding, routing and reply each (bench/rate-limit.js). Each
 * key's count is what the one-key script would give, the whole batch is
 * atomic, and a key Redis refuses (not an integer: someone else wrote it)
 * fails that hit only, as it would alone.
 *
 * Not on a Redis Cluster: a script's keys must share a slot there.
 */

const debug = require('debug')('clusterize:rate-limit')

/** Keys per call: a long batch is split, so that one call never holds Redis for long. */
const MAX_KEYS_PER_CALL = 256

const INCREMENT_MANY = `
local out = {}
for i = 1, #KEYS do
  local hits = redis.pcall('INCR', KEYS[i])
  if type(hits) == 'table' and hits.err then
    out[2 * i - 1] = hits.err
    out[2 * i] = 0
  else
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 then
      redis.call('PEXPIRE', KEYS[i], ARGV[i])
      ttl = tonumber(ARGV[i])
    end
    out[2 * i - 1] = hits
    out[2 * i] = ttl
  end
end
return out`

class HitBatch {
  /**
   * @param {object} client an ioredis Redis client (one node or Sentinel-managed) with czRateIncrement defined
   */
  constructor (client) {
    this.client = client
    /** @type {Array<{ key: string, windowMs: number, resolve: Function, reject: Function }>} */
    this.queue = []
    this.flush = this.flush.bind(this)
    if (typeof client.czRateIncrementMany !== 'function') client.defineCommand('czRateIncrementMany', { lua: INCREMENT_MANY })
  }

  /**
   * @param {string} key the full Redis key
   * @param {number} windowMs
   * @returns {Promise<[number, number]>} the count and the key's time to live in ms
   */
  increment (key, windowMs) {
    return new Promise((resolve, reject) => {
      if (this.queue.length === 0) setImmediate(this.flush)
      this.queue.push({ key, windowMs, resolve, reject })
    })
  }

  flush () {
    const queue = this.queue
    this.queue = []
    // Written now, by the client itself: this is already the end of the turn.
    if (queue.length === 1) {
      const only = queue[0]
      this.client.czRateIncrement(only.key, only.windowMs).then(only.resolve, only.reject)
      return
    }
    debug('%d hits in one call', queue.length)
    for (let start = 0; start < queue.length; start += MAX_KEYS_PER_CALL) {
      const part = queue.slice(start, start + MAX_KEYS_PER_CALL)
      const args = [part.length]
      for (const hit of part) args.push(hit.key)
      for (const hit of part) args.push(hit.windowMs)
      this.client.czRateIncrementMany.apply(this.client, args).then(function answerEach (out) {
        for (let i = 0; i < part.length; i++) {
          const hits = out[2 * i]
          if (typeof hits === 'string') part[i].reject(new Error(`rate-limit count refused by Redis: ${hits}`))
          else part[i].resolve([hits, out[2 * i + 1]])
        }
      }, function failEach (err) {
        for (const hit of part) hit.reject(err)
      })
    }
  }
}

module.exports = { HitBatch, MAX_KEYS_PER_CALL, INCREMENT_MANY }
