'use strict'

/**
 * The primary-side rate-limit service: the handlers the workers'
 * ClusterStore calls (through lib/services once it lands), over the
 * counters of this host (RateLimitCounters) or of the fleet
 * (RedisRateLimitCounters, with bus.redis or the `redis` option).
 * Handlers take and return plain data; a bad request is refused with an
 * error, never crashes the primary.
 */

const { ClusterizeError } = require('../errors')
const { RateLimitCounters } = require('./rate-limit-counters')
const { RedisRateLimitCounters } = require('./rate-limit-redis')

const SERVICE = 'rate-limit'

/** The ops of the service, as the worker's store sends them. */
const RATE_OP = Object.freeze({
  INCREMENT: 'inc',
  DECREMENT: 'dec',
  GET: 'get',
  RESET_KEY: 'reset',
  RESET_ALL: 'resetAll'
})

/** A generous bound on a key (prefix included): an IP or an API key is far shorter. */
const MAX_KEY_LENGTH = 1024
const MAX_WINDOW_MS = 2 ** 31 - 1

/**
 * @param {{ redis?: object, keyPrefix?: string, maxKeys?: number, now?: () => number, log?: object }} [options]
 *   redis: the app-state connection the primary opened, { client, commands, cluster }
 *   (./redis-client.js connectState; counts shared by every host);
 *   keyPrefix: put before every Redis key
 * @returns {{ name: string, counters: object, handlers: Record<string, (data: object) => *> }}
 */
function createRateLimitService (options) {
  options = options || {}
  const counters = options.redis
    ? new RedisRateLimitCounters(options.redis, { keyPrefix: options.keyPrefix, now: options.now })
    : new RateLimitCounters({ maxKeys: options.maxKeys, now: options.now, log: options.log })
  const handlers = {
    [RATE_OP.INCREMENT]: function increment (data) {
      return counters.increment(checkKey(data), checkWindow(data))
    },
    [RATE_OP.DECREMENT]: function decrement (data) {
      return counters.decrement(checkKey(data))
    },
    [RATE_OP.GET]: function get (data) {
      return counters.get(checkKey(data))
    },
    [RATE_OP.RESET_KEY]: function resetKey (data) {
      return counters.resetKey(checkKey(data))
    },
    [RATE_OP.RESET_ALL]: function resetAll (data) {
      const prefix = data && data.prefix
      if (typeof prefix !== 'string' || prefix.length > MAX_KEY_LENGTH) throw badRequest('prefix', prefix)
      return counters.resetAll(prefix)
    }
  }
  return { name: SERVICE, counters, handlers }
}

function checkKey (data) {
  const key = data && data.key
  if (typeof key !== 'string' || key.length > MAX_KEY_LENGTH) throw badRequest('key', key)
  return key
}

function checkWindow (data) {
  const windowMs = data && data.windowMs
  if (!Number.isInteger(windowMs) || windowMs < 1 || windowMs > MAX_WINDOW_MS) throw badRequest('windowMs', windowMs)
  return windowMs
}

function badRequest (field, value) {
  const shown = typeof value === 'string' ? `a string of ${value.length} characters` : typeof value
  return new ClusterizeError(`rate-limit request: bad ${field} (${shown})`, 'ERR_CLUSTERIZE_RATE_LIMIT_REQUEST')
}

/**
 * The service of lib/services/list.js: this host's counters, or Redis's
 * with bus.redis (connected on the first hit).
 */
const rateLimitService = {
  name: SERVICE,
  handover: { crosses: 'handedOver', what: 'every client\'s hits and window end (without Redis); the old workers\' hits count in the new primary from the handover on' },
  start: function startRateLimitService (context) {
    const { lazyStateBackend } = require('./redis-client')
    const service = lazyStateBackend(context, function buildRateLimit (connection, namespace) {
      return createRateLimitService(connection ? { redis: connection, keyPrefix: namespace + ':rl:' } : { log: context && context.log })
    })
    const requests = {}
    for (const op of Object.values(RATE_OP)) {
      requests[op] = function rateLimitRequest (data) { return service.current().handlers[op](data) }
    }
    return {
      requests,
      api: {
        size () {
          const built = service.built()
          return built === null ? 0 : built.counters.size
        },
        /** New keys refused at the bound (this host's counters; Redis's have none). */
        refused () {
          const built = service.built()
          return built === null ? 0 : (built.counters.refused || 0)
        }
      },
      handover: {
        export () {
          if (service.shared) return undefined
          const built = service.built()
          return built === null ? [] : built.counters.exportEntries()
        },
        import (items) {
          const counters = service.current().counters
          if (typeof counters.importEntries === 'function') counters.importEntries(items)
        }
      },
      close: () => service.close()
    }
  }
}

module.exports = { createRateLimitService, rateLimitService, RATE_OP, SERVICE, MAX_KEY_LENGTH }
