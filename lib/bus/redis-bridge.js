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
 * While Redis is unreachable (or has bus.maxQueuedBytes unacknowledged),
 * outgoing broadcasts wait in a buffer of at most bus.outageBufferBytes and
 * are published in order once it answers again, after the subscribers seen
 * before the outage are back (at most SUBSCRIBERS_WAIT_MS): a short outage
 * loses nothing. Past the buffer they are dropped (counted in
 * status().dropped). ioredis reconnects by itself; errors are logged, never thrown.
 *
 * A PUBLISH that failed may have reached Redis before the connection broke, and
 * is published again: each frame carries this bridge's sequence number (`q`),
 * and a receiver drops a frame of an instance whose number it has seen already,
 * so a retry never delivers twice (frames go out in sequence order).
 */

const os = require('os')
const crypto = require('crypto')
const debug = require('debug')('clusterize:bus')
const { createCodec } = require('./codec')
const { parseRedisTarget, describeRedisTarget, topologyOf } = require('../redis/target')
const { createPubSub } = require('../redis/pubsub')
const { explainRedisError } = require('../redis/explain')
const { RedisAvailability } = require('../redis/availability')

const NEWLINE = 10
const FRAME_VERSION = 1
/** After an outage, how long the buffer waits for the subscribers seen before it to subscribe again. */
const SUBSCRIBERS_WAIT_MS = 5000
const SUBSCRIBERS_POLL_MS = 50
/** How often the subscriber count is refreshed while Redis is healthy (on publish, never on a timer). */
const SUBSCRIBERS_REFRESH_MS = 2000
/** Bound on the set of other hosts' instances remembered (a fleet is far smaller; restarts mint new ones). */
const MAX_PEERS_HEARD = 4096
/** bus.outageBufferBytes when the caller gives none: lib/config.js's default. */
const DEFAULT_OUTAGE_BUFFER_BYTES = require('../config').DEFAULTS.bus.outageBufferBytes

/**
 * @param {object} options
 * @param {*} options.redis a Redis target (see lib/redis/target.js): one node, Sentinel or Cluster
 * @param {'auto'|false} [options.sharded] sharded pub/sub on a Redis Cluster (bus.shardedPubSub)
 * @param {string} options.channel Redis channel name (bus.channel)
 * @param {import('./codec').Codec} options.codec
 * @param {{ info: Function, warn: Function, error: Function }} options.log
 * @param {number} [options.outageBufferBytes] bus.outageBufferBytes: what waits for Redis to return (0: nothing)
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
  const stats = { published: 0, received: 0, dropped: 0, echoes: 0, malformed: 0, flushed: 0, repeated: 0 }
  const outageBufferBytes = options.outageBufferBytes === undefined ? DEFAULT_OUTAGE_BUFFER_BYTES : options.outageBufferBytes
  /**
   * Frames waiting for Redis, oldest first: `{ seq, frame }`. Once anything
   * waits here, new frames queue behind it, so the other hosts see one order.
   */
  let buffer = []
  let bufferedBytes = 0
  let nextSeq = 1
  let flushing = false
  let bufferFullLogged = false
  /** Subscribers of the channel when Redis was last healthy: a flush waits for them. */
  let knownSubscribers = 0
  /**
   * Other hosts' bridge instances heard from, and the last sequence number of each:
   * the first frame of a new one refreshes knownSubscribers.
   * @type {Map<string, number>}
   */
  const peersHeard = new Map()
  let subscribersCheckedAt = 0
  /** @type {Array<Function>} waiting for an acknowledgement (the flush, when queuedBytes is at the bound) */
  let ackWaiters = []
  /**
   * Bytes handed to PUBLISH and not yet acknowledged. ioredis buffers commands
   * without bound while the connection is up but Redis is slow or frozen, so
   * the bridge bounds them by bus.maxQueuedBytes like any other peer.
   */
  let queuedBytes = 0
  /** Both connections up, or not (lib/redis/availability.js): one log line per outage, one when it ends. */
  const availability = new RedisAvailability()
  let closed = false

  const target = parseRedisTarget(options.redis, 'bus.redis')
  const where = describeRedisTarget(target)

  function onError (which, err) {
    const cause = explainRedisError(err)
    const wasUp = availability.isUp
    if (availability.markDown(`${which}: ${cause}`)) {
      // One line per outage; the reconnect attempts that follow are traced with debug.
      const what = wasUp ? `lost its ${which} connection` : `cannot connect its ${which}`
      // Not the error object: ioredis attaches the failed command, which may be AUTH with the password.
      log.warn(`bus: Redis bridge (${where}) ${what}: ${cause}; reconnecting`, { channel })
      if (options.onStateChange) options.onStateChange({ connected: false, lastError: availability.lastError })
    } else {
      debug('redis %s error: %s', which, cause)
    }
  }

  /** Both connections work again (a ready event, or a message that went through on a cluster). */
  function onReady () {
    if (closed || !pubsub.ready) return
    // Also when no error marked the outage (a quick reconnect): what waits goes out now.
    if (!availability.markUp()) {
      if (buffer.length > 0 && !flushing) flush()
      return
    }
    log.info(`bus: Redis bridge connected on channel "${channel}" (${where}, ${pubsub.mode} pub/sub)`, { channel, host })
    if (options.onStateChange) options.onStateChange({ connected: true, channel })
    if (buffer.length > 0) flush()
    else refreshSubscribers(true)
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
    const lastSeq = peersHeard.get(header.i)
    if (lastSeq === undefined) {
      // A host that subscribed after our last count: count again now, so an
      // outage soon after does not flush the buffer before it is back.
      if (peersHeard.size >= MAX_PEERS_HEARD) peersHeard.clear()
      refreshSubscribers(true)
    }
    if (Number.isSafeInteger(header.q)) {
      // Published again after a failed PUBLISH that had reached Redis after all: delivered already.
      if (lastSeq !== undefined && header.q <= lastSeq) {
        stats.repeated++
        return
      }
      peersHeard.set(header.i, header.q)
    } else if (lastSeq === undefined) {
      peersHeard.set(header.i, 0)
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

  /** Keep `entry` for later, in order; past bus.outageBufferBytes drop it (counted, logged once per outage). */
  function hold (entry) {
    const size = entry.frame.length
    if (bufferedBytes + size > outageBufferBytes) {
      stats.dropped++
      if (!bufferFullLogged) {
        bufferFullLogged = true
        log.warn(`bus: Redis bridge (${where}) is unavailable and ${bufferedBytes} bytes already wait for it (bus.outageBufferBytes ${outageBufferBytes}): ` +
          'further broadcasts are not sent to the other hosts until it is back (delivered on this host as usual)', { channel })
      }
      return
    }
    // Sorted by seq: a publish that failed goes back in front of what was sent after it.
    let index = buffer.length
    while (index > 0 && buffer[index - 1].seq > entry.seq) index--
    buffer.splice(index, 0, entry)
    bufferedBytes += size
  }

  /** Hand one frame to Redis; a failure puts it back in the buffer. */
  function send (entry) {
    const size = entry.frame.length
    const sending = pubsub.publish(entry.frame)
    if (sending === null) {
      hold(entry)
      return
    }
    queuedBytes += size
    stats.published++
    sending.then(function published () {
      queuedBytes -= size
      acknowledged()
      onReady()
    }, function publishFailed (err) {
      queuedBytes -= size
      stats.published--
      availability.noteError(`publisher: ${err.message}`)
      debug('publish failed, kept for later: %s', err.message)
      // It may have reached Redis before the connection broke: a retry can deliver it twice, never zero times.
      if (!closed) hold(entry)
      acknowledged()
    })
  }

  function acknowledged () {
    if (ackWaiters.length === 0) return
    const waiters = ackWaiters
    ackWaiters = []
    for (const resolve of waiters) resolve()
  }

  /** Learn how many subscribe now (at most every SUBSCRIBERS_REFRESH_MS unless `now`). */
  function refreshSubscribers (now) {
    const at = Date.now()
    if (!now && at - subscribersCheckedAt < SUBSCRIBERS_REFRESH_MS) return
    subscribersCheckedAt = at
    pubsub.subscribers().then(function remember (count) {
      if (count !== null && buffer.length === 0 && !flushing) knownSubscribers = count
    })
  }

  /**
   * Redis is back: once the subscribers seen before the outage have subscribed
   * again (or SUBSCRIBERS_WAIT_MS passed), publish the buffer in order, never
   * more than bus.maxQueuedBytes unacknowledged. Publishes made meanwhile queue
   * behind it.
   */
  async function flush () {
    if (flushing || closed) return
    flushing = true
    try {
      const giveUpAt = Date.now() + SUBSCRIBERS_WAIT_MS
      for (;;) {
        const count = await pubsub.subscribers()
        if (closed || count === null || count >= knownSubscribers || Date.now() >= giveUpAt) break
        await sleep(SUBSCRIBERS_POLL_MS)
      }
      while (buffer.length > 0 && !closed && pubsub.ready) {
        if (queuedBytes > 0 && queuedBytes + buffer[0].frame.length > codec.maxQueuedBytes) {
          await new Promise((resolve) => ackWaiters.push(resolve))
          continue
        }
        const entry = buffer.shift()
        bufferedBytes -= entry.frame.length
        stats.flushed++
        send(entry)
      }
    } catch (err) {
      debug('flushing the outage buffer failed: %s', err && err.stack)
    } finally {
      flushing = false
    }
    if (buffer.length === 0) {
      bufferFullLogged = false
      return
    }
    // Redis went away again mid-flush: the next ready (or publish) starts over; a failed send may have refilled it meanwhile.
    if (pubsub.ready && !closed) setImmediate(flush)
  }

  return {
    host,
    instance,

    /**
     * Publish an already-encoded broadcast to the other hosts (fire and
     * forget): now, or from the outage buffer once Redis answers again.
     */
    publish (topic, payload, from, generation) {
      if (closed) return
      const seq = nextSeq++
      const header = { v: FRAME_VERSION, i: instance, h: host, t: topic, f: from, s: codec.name, q: seq }
      if (generation !== undefined && generation !== null) header.g = generation
      if (payload === undefined) header.n = 1
      const head = Buffer.from(JSON.stringify(header) + '\n')
      const frame = payload === undefined
        ? head
        : Buffer.concat([head, typeof payload === 'string' ? Buffer.from(payload) : payload])
      const entry = { seq, frame }
      if (buffer.length > 0 || flushing || !pubsub.ready || queuedBytes + frame.length > codec.maxQueuedBytes) {
        hold(entry)
        if (pubsub.ready) flush()
        return
      }
      send(entry)
      refreshSubscribers(false)
    },

    /** @returns {object} for /ready and /stats */
    status () {
      return {
        connected: availability.isUp && pubsub.ready,
        publisher: pubsub.publisherStatus,
        subscriber: pubsub.subscriberStatus,
        topology: topologyOf(target),
        pubsub: pubsub.mode,
        channel,
        host,
        lastError: availability.lastError,
        lastErrorAt: availability.lastErrorAt,
        published: stats.published,
        received: stats.received,
        dropped: stats.dropped,
        malformed: stats.malformed,
        /** Frames received again after a retried PUBLISH, dropped (delivered once). */
        repeated: stats.repeated,
        queuedBytes,
        buffered: buffer.length,
        bufferedBytes,
        outageBufferBytes,
        /** Subscribers of the channel when last counted while healthy: what a flush after an outage waits for. */
        subscribers: knownSubscribers,
        flushed: stats.flushed
      }
    },

    /** Close our connections (a client passed in by the user is left open). */
    close () {
      if (closed) return Promise.resolve()
      closed = true
      acknowledged()
      return pubsub.close()
    }
  }
}

function sleep (ms) {
  return new Promise((resolve) => setTimeout(resolve, ms).unref())
}

module.exports = { createRedisBridge, DEFAULT_OUTAGE_BUFFER_BYTES }
