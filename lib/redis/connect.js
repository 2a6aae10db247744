'use strict'

/**
 * Build ioredis clients for a checked Redis target (see target.js): one node,
 * a Sentinel-managed primary or a Redis Cluster. What the user wrote wins over
 * our defaults; a client the user passed in is never built here.
 */

const debug = require('debug')('clusterize:redis')

const MAX_RECONNECT_DELAY_MS = 1000

function reconnectDelay (times) {
  return Math.min(50 * times, MAX_RECONNECT_DELAY_MS)
}

/** @returns {boolean} reconnect (without resending the command) on a READONLY error */
function reconnectWhenReadOnly (err) {
  return /^READONLY/.test(err.message)
}

/**
 * Fail-fast settings: no queue while disconnected, one retry per command, a
 * command timeout, and reconnecting forever with a short capped backoff. A
 * request then gets its answer (or a 503) within timeoutMs, never waits on a
 * queue that grows through an outage.
 * @param {number} timeoutMs
 */
function failFast (timeoutMs) {
  return {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: timeoutMs,
    connectTimeout: Math.max(timeoutMs, 1000)
  }
}

/**
 * @param {{ kind: string, url?: string, options?: object, nodes?: Array }} target from parseRedisTarget (not a client)
 * @param {{ timeoutMs?: number, offlineQueue?: false, resendUnanswered?: false, maxRetriesPerRequest?: number, cluster?: object, autoPipelining?: boolean }} [settings]
 *   timeoutMs: fail fast with this command timeout (else ioredis's defaults, offline queue
 *   included, so a subscriber's SUBSCRIBE waits for the connection);
 *   offlineQueue: false: no queue while disconnected (a publisher that drops instead);
 *   resendUnanswered: false: commands written before a disconnect and never answered fail instead
 *   of being sent again on reconnect (ioredis's autoResendUnfulfilledCommands): the caller decides;
 *   cluster: extra ClusterOptions (e.g. shardedSubscribers);
 *   autoPipelining: commands issued in one event-loop turn go out in one write (ioredis's
 *   enableAutoPipelining), for a connection many requests share
 * @returns {import('ioredis').Redis | import('ioredis').Cluster}
 */
function connectRedis (target, settings) {
  const { Redis, Cluster } = require('ioredis')
  settings = settings || {}
  const ours = settings.timeoutMs ? failFast(settings.timeoutMs) : {}
  if (settings.offlineQueue === false) ours.enableOfflineQueue = false
  if (settings.maxRetriesPerRequest !== undefined) ours.maxRetriesPerRequest = settings.maxRetriesPerRequest
  if (settings.resendUnanswered === false) ours.autoResendUnfulfilledCommands = false
  if (settings.autoPipelining) ours.enableAutoPipelining = true

  if (target.kind === 'cluster') {
    const user = target.options || {}
    const redisOptions = Object.assign({}, ours, user.redisOptions)
    delete redisOptions.enableOfflineQueue
    const clusterDefaults = {
      clusterRetryStrategy: reconnectDelay,
      // A failover takes the node timeout plus an election: retry the slot's
      // commands through it instead of failing at the first refused connection.
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 200
    }
    if (ours.enableOfflineQueue === false) clusterDefaults.enableOfflineQueue = false
    if (ours.enableAutoPipelining) clusterDefaults.enableAutoPipelining = true
    const options = Object.assign(clusterDefaults, settings.cluster, user, { redisOptions })
    return new Cluster(target.nodes, options)
  }
  const defaults = Object.assign({ retryStrategy: reconnectDelay }, ours)
  if (target.kind === 'sentinel') {
    // A primary demoted while it stays up answers writes with READONLY:
    // reconnect, which asks the sentinels for the new one. (ioredis's
    // failoverDetector would notice sooner, but its sentinel connections have
    // no error listener, so a sentinel that is down prints to the console.)
    defaults.reconnectOnError = reconnectWhenReadOnly
    defaults.sentinelRetryStrategy = reconnectDelay
  }
  if (target.url) return new Redis(target.url, defaults)
  return new Redis(Object.assign(defaults, target.options))
}

/**
 * Disconnect a client we opened, resolving once it has ended (or after 1 s,
 * or at once if disconnect() throws): closing never hangs nor throws.
 * @param {object} client an ioredis Redis or Cluster
 * @returns {Promise<void>}
 */
function disconnectQuietly (client) {
  if (client.status === 'end') return Promise.resolve()
  return new Promise(function disconnect (resolve) {
    const timer = setTimeout(resolve, 1000)
    if (timer.unref) timer.unref()
    client.once('end', function ended () {
      clearTimeout(timer)
      resolve()
    })
    try {
      client.disconnect()
    } catch (err) {
      debug('disconnect failed: %s', err.message)
      resolve()
    }
  })
}

module.exports = { connectRedis, reconnectDelay, disconnectQuietly }
