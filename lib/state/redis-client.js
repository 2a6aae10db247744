'use strict'

/**
 * The one Redis connection of the primary's app-state services (rate-limit
 * counts, singleton leases, cron runs) when bus.redis is set: opened on
 * first use, fail fast (no offline queue, a command timeout), commands of
 * one loop turn pipelined. A client the user passed is duplicated, so its
 * own settings and queue stay the user's.
 */

const debug = require('debug')('clusterize:state')
const { parseRedisTarget } = require('../redis/target')
const { connectRedis, disconnectQuietly } = require('../redis/connect')

const COMMAND_TIMEOUT_MS = 1000

/**
 * @param {object} config the resolved clusterize config
 * @returns {{ get: () => object|null, namespace: string, close: () => Promise<void> }}
 */
function stateRedis (config) {
  const option = config && config.bus ? config.bus.redis : null
  let client = null
  return {
    /** Keys of this cluster (fleet) live under the bus channel's name: two apps on one Redis share nothing. */
    namespace: (config && config.bus && config.bus.channel) || 'clusterize:bus',
    get () {
      if (!option) return null
      if (client === null) {
        const target = parseRedisTarget(option, 'bus.redis')
        client = target.client
          ? target.client.duplicate({ enableOfflineQueue: false, commandTimeout: COMMAND_TIMEOUT_MS })
          : connectRedis(target, { timeoutMs: COMMAND_TIMEOUT_MS, autoPipelining: true })
        client.on('error', function stateRedisError (err) { debug('redis: %s', err.message) })
      }
      return client
    },
    close () {
      const open = client
      client = null
      return open === null ? Promise.resolve() : disconnectQuietly(open)
    }
  }
}

module.exports = { stateRedis, COMMAND_TIMEOUT_MS }
