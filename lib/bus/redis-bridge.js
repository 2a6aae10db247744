'use strict'

/**
 * Bridges broadcasts between hosts over one Redis pub/sub channel. It runs in
 * the primary only (or the single process with `workers: 0`): one publisher
 * and one dedicated subscriber connection per host, not per worker.
 *
 * Frame on the wire (a Buffer): one JSON header line, '\n', then the payload
 * exactly as the sender encoded it. The header carries this bridge's random
 * instance id so each host drops its own echoes, and a readable host id that
 * receivers see as `meta.host`.
 *
 * Delivery across hosts is at-most-once: while Redis is unreachable,
 * broadcasts are dropped (counted in status().dropped), never queued.
 * ioredis reconnects by itself; errors are logged, never thrown.
 */

const os = require('os')
const crypto = require('crypto')
const debug = require('debug')('clusterize:bus')
const { createCodec } = require('./codec')
const { parseRedisTarget, describeRedisTarget, topologyOf } = require('../redis/target')
const { createPubSub } = require('../redis/pubsub')
const { explainRedisError } = require('../redis/explain')

const NEWLINE = 10
const FRAME_VERSION = 1

/**
 * @param {object} options
 * @param {*} options.redis a Redis target (see lib/redis/target.js): one node, Sentinel or Cluster
 * @param {'auto'|false} [options.sharded] sharded pub/sub on a Redis Cluster (bus.shardedPubSub)
 * @param {string} options.channel Redis channel name (bus.channel)
 * @param {import('./codec').Codec} options.codec
 * @param {{ info: Function, warn: Function, error: Function }} options.log
 * @param {string} [options.hostId] what other hosts see as meta.host
 * @param {(topic: string, payload: *, from: *, generation: *, host: string) => void} options.onMessage
 */
function createRedisBridge (options) {
  const channel = options.channel
  const codec = options.codec
  const log = options.log
  const onMessage = options.onMessage
  const instance = crypto.randomBytes(8).toString('hex')
  const host = options.hostId || `${os.hostname()}:${process.pid}`
  const foreignCodecs = new Map()
  const stats = { published: 0, received: 0, dropped: 0, echoes: 0, malformed: 0 }
  /**
   * Bytes handed to PUBLISH and not yet acknowledged. ioredis buffers commands
   * without bound while the connection is up but Redis is slow or frozen, so
   * the bridge bounds them by bus.maxQueuedBytes like any other peer.
   */
  let queuedBytes = 0
  let lastError = null
  let lastErrorAt = null
  let healthy = false
  let loggedOnce = false
  let closed = false

  const target = parseRedisTarget(options.redis, 'bus.redis')
  const where = describeRedisTarget(target)

  function onError (which, err) {
    const cause = explainRedisError(err)
    lastError = `${which}: ${cause}`
    lastErrorAt = new Date().toISOString()
    if (healthy || !loggedOnce) {
      // One line per outage; the reconnect attempts that follow are traced with debug.
      const what = loggedOnce ? `lost its ${which} connection` : `cannot connect its ${which}`
      loggedOnce = true
      // Not the error object: ioredis attaches the failed command, which may be AUTH with the password.
      log.warn(`bus: Redis bridge (${where}) ${what}: ${cause}; reconnecting`, { channel })
      if (options.onStateChange) options.onStateChange({ connected: false, lastError })
    } else {
      debug('redis %s error: %s', which, cause)
    }
    healthy = false
  }

  /** Both connections work again (a ready event, or a message that went through on a cluster). */
  function onReady () {
    if (closed || healthy || !pubsub.ready) return
    healthy = true
    log.info(`bus: Redis bridge connected on channel "${channel}" (${where}, ${pubsub.mode} pub/sub)`, { channel, host })
    if (options.onStateChange) options.onStateChange({ connected: true, channel })
  }

  const pubsub = createPubSub({ target, channel, sharded: options.sharded, onFrame: receive, onError, onReady })

  function receive (frame) {
    if (!Buffer.isBuffer(frame)) return
    const end = frame.indexOf(NEWLINE)
    let header
    try {
      if (end === -1) throw new Error('no header')
      header = JSON.parse(frame.toString('utf8', 0, end))
      if (!header || header.v !== FRAME_VERSION || typeof header.t !== 'string' || header.t.length === 0 || header.t.length > 256) throw new Error('bad header')
    } catch (err) {
      stats.malformed++
      debug('ignoring malformed frame on %s: %s', channel, err.message)
      return
    }
    if (header.i === instance) {
      stats.echoes++
      return
    }
    const body = frame.subarray(end + 1)
    if (body.length > codec.maxMessageBytes) {
      stats.dropped++
      log.warn(`bus: dropped a ${body.length}-byte message on topic "${header.t}" from ${header.h}: over bus.maxMessageBytes (${codec.maxMessageBytes})`, { topic: header.t })
      return
    }
    let payload
    try {
      payload = header.n === 1 ? undefined : toLocalPayload(header.s, body)
    } catch (err) {
      stats.malformed++
      debug('cannot convert message on %s from %s: %s', header.t, header.h, err.message)
      return
    }
    stats.received++
    onReady()
    onMessage(header.t, payload, header.f, header.g === undefined ? null : header.g, typeof header.h === 'string' ? header.h : 'unknown')
  }

  /** Hosts may run different bus.serialization: convert to ours. */
  function toLocalPayload (serialization, body) {
    const theirs = serialization === 'advanced' ? 'advanced' : 'json'
    const local = theirs === 'json' ? body.toString('utf8') : Buffer.from(body)
    if (theirs === codec.name) return local
    let foreign = foreignCodecs.get(theirs)
    if (!foreign) {
      foreign = createCodec({ serialization: theirs, maxMessageBytes: codec.maxMessageBytes })
      foreignCodecs.set(theirs, foreign)
    }
    return codec.encode('bridge', foreign.decode(local))
  }

  return {
    host,
    instance,

    /**
     * Publish an already-encoded broadcast to the other hosts (fire and forget).
     */
    publish (topic, payload, from, generation) {
      if (closed) return
      if (!pubsub.ready) {
        stats.dropped++
        return
      }
      const header = { v: FRAME_VERSION, i: instance, h: host, t: topic, f: from, s: codec.name }
      if (generation !== undefined && generation !== null) header.g = generation
      if (payload === undefined) header.n = 1
      const head = Buffer.from(JSON.stringify(header) + '\n')
      const frame = payload === undefined
        ? head
        : Buffer.concat([head, typeof payload === 'string' ? Buffer.from(payload) : payload])
      const size = frame.length
      if (queuedBytes + size > codec.maxQueuedBytes) {
        // At most once across hosts anyway: drop (counted) rather than buffer.
        stats.dropped++
        debug('publish dropped: %d bytes already waiting for Redis (bus.maxQueuedBytes %d)', queuedBytes, codec.maxQueuedBytes)
        return
      }
      const sending = pubsub.publish(frame)
      if (sending === null) {
        stats.dropped++
        return
      }
      queuedBytes += size
      stats.published++
      sending.then(function published () {
        queuedBytes -= size
        onReady()
      }, function publishFailed (err) {
        queuedBytes -= size
        stats.dropped++
        stats.published--
        lastError = `publisher: ${err.message}`
        lastErrorAt = new Date().toISOString()
        debug('publish failed: %s', err.message)
      })
    },

    /** @returns {object} for /ready and /stats */
    status () {
      return {
        connected: healthy && pubsub.ready,
        publisher: pubsub.publisherStatus,
        subscriber: pubsub.subscriberStatus,
        topology: topologyOf(target),
        pubsub: pubsub.mode,
        channel,
        host,
        lastError,
        lastErrorAt,
        published: stats.published,
        received: stats.received,
        dropped: stats.dropped,
        malformed: stats.malformed,
        queuedBytes
      }
    },

    /** Close our connections (a client passed in by the user is left open). */
    close () {
      if (closed) return Promise.resolve()
      closed = true
      return pubsub.close()
    }
  }
}

module.exports = { createRedisBridge }
