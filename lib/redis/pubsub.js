'use strict'

/**
 * One pub/sub channel over any Redis topology: a publisher and a dedicated
 * subscriber connection, for one node, a Sentinel-managed primary (both
 * follow the primary through a failover) or a Redis Cluster.
 *
 * On a Redis Cluster with Redis >= 7 the channel is sharded (SPUBLISH /
 * SSUBSCRIBE): a message goes to the one shard that owns the channel's slot
 * and its subscribers, instead of being copied to every node of the cluster
 * as classic PUBLISH is. Older clusters, or `sharded: false`, use classic
 * pub/sub. ioredis follows the channel's slot to its new master after a
 * failover and subscribes again.
 */

const debug = require('debug')('clusterize:redis')
const { connectRedis, disconnectQuietly: quietly } = require('./connect')
const { isClusterTarget } = require('./target')

/**
 * @param {object} options
 * @param {ReturnType<typeof import('./target').parseRedisTarget>} options.target
 * @param {string} options.channel
 * @param {'auto'|false} [options.sharded='auto']
 * @param {(frame: Buffer) => void} options.onFrame
 * @param {(which: 'publisher'|'subscriber', err: Error) => void} options.onError
 * @param {() => void} options.onReady both connections ready and subscribed
 */
function createPubSub (options) {
  const { target, channel, onFrame, onError, onReady } = options
  const cluster = isClusterTarget(target)
  let mode = cluster ? null : 'classic'
  let sub = null
  let subscribed = false
  let closed = false
  const ownsPub = target.client === undefined
  // The publisher never queues while offline: at-most-once, bounded memory. A PUBLISH written
  // just before the connection broke fails rather than going out on reconnect, when the other
  // hosts may not have subscribed again: the bridge keeps it for its flush (./bus/redis-bridge.js).
  const pub = ownsPub ? connectRedis(target, { offlineQueue: false, maxRetriesPerRequest: 1, resendUnanswered: false }) : target.client
  pub.on('error', (err) => onError('publisher', err))
  pub.on('ready', whenReady)
  if (!ownsPub && pub.status === 'ready') process.nextTick(whenReady)
  if (mode === 'classic') subscribe()

  function whenReady () {
    if (closed) return
    if (mode === null) {
      chooseMode().then(subscribe, (err) => onError('publisher', err))
      return
    }
    if (subscribed && pub.status === 'ready' && sub.status === 'ready') onReady()
  }

  /** Sharded when asked for (the default) and every node knows SPUBLISH. */
  async function chooseMode () {
    if (options.sharded === false) {
      mode = 'classic'
    } else {
      const [info] = await pub.call('COMMAND', 'INFO', 'SPUBLISH')
      mode = Array.isArray(info) ? 'sharded' : 'classic'
    }
    debug('bus channel %s on a Redis Cluster: %s pub/sub', channel, mode)
  }

  function subscribe () {
    if (closed || sub !== null) return
    const sharded = mode === 'sharded'
    if (target.client === undefined) {
      sub = connectRedis(target, { cluster: sharded ? { shardedSubscribers: true } : undefined })
    } else {
      sub = cluster ? target.client.duplicate([], sharded ? { shardedSubscribers: true } : {}) : target.client.duplicate()
    }
    sub.on('error', (err) => onError('subscriber', err))
    sub.on('ready', whenReady)
    sub.on(sharded ? 'smessageBuffer' : 'messageBuffer', function onMessage (channelName, frame) {
      if (closed || String(channelName) !== channel) return
      onFrame(frame)
    })
    // ioredis subscribes again by itself after a reconnect or a slot move.
    const subscribing = sharded ? sub.ssubscribe(channel) : sub.subscribe(channel)
    subscribing.then(function subscribedOnce () {
      subscribed = true
      whenReady()
    }, function subscribeFailed (err) {
      if (!closed) onError('subscriber', err)
    })
  }

  return {
    /** 'classic', 'sharded', or null while a cluster's support is not known yet. */
    get mode () { return mode },
    get ready () { return subscribed && pub.status === 'ready' && sub !== null && sub.status === 'ready' },
    get publisherStatus () { return pub.status },
    get subscriberStatus () { return sub === null ? 'wait' : sub.status },

    /** @returns {Promise<number>|null} null when it cannot be sent now */
    publish (frame) {
      if (closed || mode === null || pub.status !== 'ready') return null
      return mode === 'sharded' ? pub.spublish(channel, frame) : pub.publish(channel, frame)
    },

    /**
     * How many connections subscribe to the channel now, as Redis counts them
     * (PUBSUB NUMSUB); null on a Redis Cluster (a command without a key goes
     * to any node, which counts only its own subscribers) or when it cannot
     * be asked now.
     * @returns {Promise<number|null>}
     */
    subscribers () {
      if (closed || cluster || pub.status !== 'ready') return Promise.resolve(null)
      const asking = pub.call('PUBSUB', 'NUMSUB', channel)
      return asking.then(function count (reply) {
        return Array.isArray(reply) && reply.length >= 2 ? Number(reply[1]) : null
      }, function cannotTell (err) {
        debug('PUBSUB NUMSUB on %s failed: %s', channel, err.message)
        return null
      })
    },

    /** Close our connections (a client passed in by the user is left open). */
    close () {
      if (closed) return Promise.resolve()
      closed = true
      const closing = []
      if (sub !== null) closing.push(quietly(sub))
      if (ownsPub) closing.push(quietly(pub))
      return Promise.all(closing).then(() => undefined)
    }
  }
}

module.exports = { createPubSub }
