'use strict'

/**
 * The one Redis connection of the primary's app-state services (rate-limit
 * counts, singleton leases, cron runs) when bus.redis is set: opened on the
 * first use by any of them, shared, closed with the last. Fail fast (no
 * offline queue, a command timeout). The rate-limit hits of one event-loop
 * turn go out as one script call (./rate-limit-hit-batch.js), the other
 * per-request counts as one pipeline per turn, without waiting for an
 * earlier turn's replies (lib/redis/turn-pipeline.js); on a Redis Cluster,
 * each its own command, through ioredis's auto-pipelining. A client the user
 * passed is duplicated, so its own settings stay the user's.
 * Its outages are logged once each, when they start and when they end
 * (lib/redis/availability.js), with what they mean for the app.
 */

const debug = require('debug')('clusterize:state')
const { parseRedisTarget, isClusterTarget } = require('../redis/target')
const { connectRedis, disconnectQuietly } = require('../redis/connect')
const { RedisAvailability } = require('../redis/availability')
const { TurnPipeline, DirectCommands } = require('../redis/turn-pipeline')

const COMMAND_TIMEOUT_MS = 1000

/** The connection shared by the services of this process: { option, client, commands, cluster, users, unfollow } */
let shared = null

/**
 * A fail-fast connection for the app-state services and how their per-request
 * commands go out on it.
 * @param {object} target from parseRedisTarget
 * @param {number} [timeoutMs=COMMAND_TIMEOUT_MS]
 * @returns {{ client: object, commands: { send: (name: string, args: Array) => Promise<*> }, cluster: boolean }}
 */
function connectState (target, timeoutMs) {
  timeoutMs = timeoutMs || COMMAND_TIMEOUT_MS
  const cluster = isClusterTarget(target)
  const client = target.client
    ? target.client.duplicate({ enableOfflineQueue: false, commandTimeout: timeoutMs })
    : connectRedis(target, { timeoutMs, autoPipelining: cluster })
  // A Cluster pipeline must keep to one node: there ioredis's auto-pipelining groups by node.
  const commands = cluster ? new DirectCommands(client) : new TurnPipeline(client)
  return { client, commands, cluster }
}

function open (option, log) {
  const { client, commands, cluster } = connectState(parseRedisTarget(option, 'bus.redis'))
  client.on('error', function stateRedisError (err) { debug('redis: %s', err.message) })
  const availability = new RedisAvailability({
    onChange (up, cause, from) {
      if (!log) return
      if (!up) {
        log.warn(`app state: Redis unreachable (${cause}): rate-limit calls fail (passOnStoreError decides), ` +
          'node-cron distributed fires are skipped, and a singleton held on this host stops once its lease cannot be renewed')
      } else if (from === 'down') {
        log.info('app state: Redis reachable again (rate limits, singletons, cron)')
      }
    }
  })
  return { option, connection: { client, commands, cluster }, users: 0, unfollow: availability.follow(client, 'app state') }
}

/**
 * @param {object} config the resolved clusterize config
 * @param {object} [log] the primary's logger
 * @returns {{ connection: () => { client: object, commands: object, cluster: boolean }|null, namespace: string, close: () => Promise<void> }}
 *   connection: the shared client and where its per-request commands go (lib/redis/turn-pipeline.js);
 *   null without bus.redis
 */
function stateRedis (config, log) {
  const option = config && config.bus ? config.bus.redis : null
  let mine = null
  return {
    /** Keys of this cluster (fleet) live under the bus channel's name: two apps on one Redis share nothing. */
    namespace: (config && config.bus && config.bus.channel) || 'clusterize:bus',
    /** With bus.redis: the state lives in Redis, shared by every primary (none to hand over). */
    shared: Boolean(option),
    connection () {
      if (!option) return null
      if (mine === null) {
        if (shared === null || shared.option !== option) shared = open(option, log)
        mine = shared
        mine.users++
      }
      return mine.connection
    },
    close () {
      const held = mine
      mine = null
      if (held === null || --held.users > 0) return Promise.resolve()
      if (shared === held) shared = null
      held.unfollow()
      return disconnectQuietly(held.connection.client)
    }
  }
}

/**
 * A state service's backend, built on its first use: on the shared Redis
 * connection with bus.redis (keys under the cluster's namespace), else local
 * to this host.
 * @template T
 * @param {{ config?: object, log?: object }} [context] the service's start context
 * @param {(connection: { client: object, commands: object, cluster: boolean }|null, namespace: string) => T} build
 *   connection: null without bus.redis
 * @returns {{ current: () => T, built: () => T|null, shared: boolean, close: () => Promise<void> }}
 */
function lazyStateBackend (context, build) {
  const redis = stateRedis(context && context.config, context && context.log)
  let backend = null
  return {
    current () {
      if (backend === null) backend = build(redis.connection(), redis.namespace)
      return backend
    },
    /** The backend if it was built, else null (nothing is connected for a look). */
    built: () => backend,
    /** Whether the state is in Redis (bus.redis), shared with any other primary. */
    shared: redis.shared,
    close: () => redis.close()
  }
}

module.exports = { stateRedis, lazyStateBackend, connectState, COMMAND_TIMEOUT_MS }
