'use strict'

/**
 * socket.io recovery in the primary with `bus.redis`: the log backend
 * shared by every host (the interface is in ./recovery-log.js; read
 * ./recovery-service.js first).
 *
 * A replayable broadcast of this host goes to the namespace's Redis Stream
 * (./recovery-redis-stream.js); every host's primary reads the stream and
 * sends the entries to its workers, the entry id as the offset. One order
 * for every host, so a client cut from one host recovers on any other.
 * Sessions are persisted in Redis, where any host can take them.
 *
 * While Redis is unreachable (or an XADD fails), this host numbers the
 * broadcasts itself with the in-memory log it is given (its clients keep
 * getting them and recover on this host; logged once per outage), and keeps
 * them, in order, for the stream. When Redis answers again they go to the
 * stream first, each with the uid it was given here, and only then the newer
 * broadcasts: the other hosts get them all through the one stream, in this
 * host's order, and this host's reader skips them (delivered here already).
 * They do not go over the bus bridge: a host that reads a sender through two
 * Redis connections cannot tell which of the two came first.
 *
 * A Redis that restarts empty loses the entries other hosts had not read yet:
 * this host's latest broadcasts Redis took are checked once it is back, and
 * those it no longer holds are sent again, ahead of the rest (the sending side
 * is ./recovery-redis-sender.js). A reader drops a second copy of an entry it
 * read (same uid), and a restore skips it.
 * Offsets of the stream given before a packet numbered here cannot replay it:
 * they are not recovered exactly.
 */

const debug = require('debug')('clusterize:socket.io')
const { RedisAvailability } = require('../redis/availability')
const { createRedisStream } = require('./recovery-redis-stream')
const { StreamSender } = require('./recovery-redis-sender')
const { replayable, shouldInclude, isStreamId, compareIds, PACKET_ARGUMENTS } = require('./recovery-log')
const { binariesUnder } = require('./binary')

class RedisLog {
  /**
   * @param {import('./recovery-log').MemoryLog} memory this host's log: the bounds, and the fallback
   * @param {{ deliver: Function }} hooks as for the MemoryLog
   * @param {{ redis: *, channel?: string, serialization?: string, maxMessageBytes?: number, log?: object, waitMs: () => number }} options
   *   the bus options; waitMs: how long a restore waits for this host's reader to reach an offset
   */
  constructor (memory, hooks, options) {
    this.memory = memory
    this.hooks = hooks
    this.options = options
    /** The Redis side, created with the first namespace: no Redis connection unless recovery is used. */
    this.stream = null
    /**
     * Can Redis take broadcasts (lib/redis/availability.js)? Down: they are
     * numbered here (logged once per outage, and once when it ends).
     */
    this.availability = new RedisAvailability({
      onChange: (up, cause, from) => {
        if (!up) {
          this.sender.outage()
          this.log.warn(`socket.io recovery: Redis (${this.stream.where}) cannot take broadcasts (${cause}): until it can, this host numbers them itself; ` +
            'its clients keep getting them but recover only on this host, and the other hosts get them when Redis takes them again', { prefix: this.stream.prefix })
        } else if (from === 'down') {
          this.log.info(`socket.io recovery: Redis (${this.stream.where}) reachable again: broadcasts go through the shared log`)
        }
        if (up) this.sender.catchUp()
      }
    })
    /** @type {Map<string, Array<{ id: string, wake: Function }>>} restores waiting for the reader to reach an offset */
    this.reaching = new Map()
    /** This host's broadcasts on their way to the stream (./recovery-redis-sender.js). */
    this.sender = new StreamSender(this)
    this.closed = false
  }

  get log () {
    return this.options.log || { info () {}, warn () {} }
  }

  has (name) { return this.memory.has(name) }

  namespace (name) {
    const known = this.memory.has(name)
    const state = this.memory.namespace(name)
    if (!known && !this.closed) this.shared().register(name)
    return state
  }

  shared () {
    if (this.stream === null) {
      this.stream = createRedisStream({
        redis: this.options.redis,
        channel: this.options.channel || 'clusterize:bus',
        serialization: this.options.serialization,
        maxMessageBytes: this.options.maxMessageBytes,
        log: this.log,
        onEntry: (name, id, entry, here) => this.fromStream(name, id, entry, here),
        onStateChange: (up, cause) => {
          if (up) this.recovered()
          else this.degrade(cause || 'connection lost')
        }
      })
    }
    return this.stream
  }

  /** A broadcast of this host, or (from an earlier clusterize) another host's over the bus bridge. */
  publish (name, data, meta) {
    // Another host's packet over the bus bridge (an earlier clusterize forwards its outage's
    // packets that way): once, whichever way it came first.
    if (meta.host !== undefined && typeof data.u === 'string' && this.stream !== null && !this.stream.claim(data.u)) return
    const state = this.namespace(name)
    if (meta.host !== undefined) return this.publishHere(state, data, meta, true)
    this.sender.publish(state, data, meta)
  }

  publishHere (state, data, meta, forward) {
    const numbered = this.memory.publish(state.name, data, meta, forward)
    if (numbered && this.stream !== null) {
      // Offsets of the stream given before this packet cannot replay it: not recovered exactly anymore.
      state.mixed = true
      state.streamFloor = this.stream.lastDelivered(state.name)
    }
  }

  /** An entry of the shared stream, in stream order: to this host's workers (entry null: skipped, only the position moves). */
  fromStream (name, id, entry, here) {
    const state = this.memory.namespaces.get(name)
    if (state === undefined) return
    // A packet this host numbered itself (its clients got it then, before the stream entries it
    // delivered meanwhile): offsets up to here cannot be replayed exactly on this host.
    if (here) state.streamFloor = id
    if (entry !== null && entry.m) {
      if (state.mixed) {
        state.mixed = false
        state.invalidate()
      }
      const message = { t: 'm', m: entry.m, i: entry.i, o: id, q: id }
      if (entry.b !== undefined) message.b = entry.b
      this.hooks.deliver(name, message)
    }
    const waiters = this.reaching.get(name)
    if (waiters === undefined) return
    const still = waiters.filter((waiter) => compareIds(waiter.id, id) > 0 || waiter.wake(true))
    if (still.length === 0) this.reaching.delete(name)
    else this.reaching.set(name, still)
  }

  /** Redis unreachable: broadcasts are numbered here. */
  get degraded () { return this.availability.status === 'down' }

  degrade (cause) {
    this.availability.markDown(cause)
  }

  recovered () {
    this.availability.markUp()
  }

  /** In Redis (any host can restore it); in this primary while Redis is away, or if it fails the write. */
  persist (name, session) {
    const state = this.namespace(name)
    if (this.stream === null || !this.stream.ready) return this.memory.persist(name, session)
    let persisting
    try {
      persisting = this.stream.persist(state.name, session, state.maxDisconnectionDuration, state.maxSessions)
    } catch (err) {
      debug('recovery: session %s not persisted in Redis: %s', session.pid, err.message)
      return this.memory.persist(name, session)
    }
    return persisting.then(() => true, (err) => {
      debug('recovery: session %s not persisted in Redis: %s', session.pid, err.message)
      return this.memory.persist(name, session)
    })
  }

  knows (name, offset) {
    return this.memory.knows(name, offset) || isStreamId(offset)
  }

  /**
   * The session from this primary (persisted while Redis was unreachable)
   * or from Redis (persisted by any host), and the packets after the offset
   * from the stream (or from this primary's log for an offset it gave while
   * Redis was unreachable). Null when not exact.
   */
  async restore (name, pid, offset) {
    const state = this.memory.namespaces.get(name)
    const stream = this.stream
    // An offset of neither kind: no restore (and the session is left alone).
    if (state === undefined || stream === null || (!isStreamId(offset) && state.seqOf(offset) === null)) return null
    let session = state.takeSession(pid, Date.now())
    if (session === null) {
      if (!stream.ready) return null
      session = await stream.take(state.name, pid)
      if (session === null || !Array.isArray(session.rooms)) return null
    }
    if (!isStreamId(offset)) {
      const missed = state.missedAfter(offset, session.rooms)
      return missed === null ? null : { session, missed, head: state.seq, epoch: state.epoch }
    }
    if (state.streamFloor !== null && compareIds(offset, state.streamFloor) <= 0) return null
    // An offset given by another host may be ahead of this host's reader: wait until it is delivered here.
    if (!(await this.reached(stream, state.name, offset))) return null
    // Up to what this host's workers have been sent: what comes after reaches the restoring worker as usual.
    const head = stream.lastDelivered(state.name)
    const entries = await stream.range(state.name, offset, head)
    // The offset's own entry first, or packets after it were trimmed (or it is no offset of this stream).
    if (entries.length === 0 || entries[0][0] !== offset) return null
    const missed = []
    for (let i = 1; i < entries.length; i++) {
      const entry = entries[i][1]
      // A copy sent again after an outage: this host's clients got the packet at the first one.
      if (stream.isCopy(entries[i][2], entries[i][0])) continue
      const kept = entry === null ? null : replayable(entry.m)
      if (kept === null || !shouldInclude(session.rooms, kept.opts)) continue
      const binaries = binariesUnder(entry.b, PACKET_ARGUMENTS)
      missed.push(binaries === undefined ? [entries[i][0], kept.packet.data] : [entries[i][0], kept.packet.data, binaries])
    }
    return { session, missed, head }
  }

  /** @returns {Promise<boolean>|boolean} this host's reader has delivered the stream entry `id` of `name` (false after waitMs) */
  reached (stream, name, id) {
    const last = stream.lastDelivered(name)
    if (last !== null && compareIds(last, id) >= 0) return true
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        const waiters = this.reaching.get(name) || []
        const index = waiters.indexOf(waiter)
        if (index !== -1) waiters.splice(index, 1)
        resolve(false)
      }, this.options.waitMs())
      timer.unref()
      const waiter = {
        id,
        wake (value) {
          clearTimeout(timer)
          resolve(value)
          return false
        }
      }
      let waiters = this.reaching.get(name)
      if (waiters === undefined) {
        waiters = []
        this.reaching.set(name, waiters)
      }
      waiters.push(waiter)
    })
  }

  sweep (now) {
    this.memory.sweep(now)
    if (this.stream === null) return
    for (const state of this.memory.namespaces.values()) this.stream.trim(state.name, state.maxDisconnectionDuration, now)
  }

  stats () {
    const stats = this.memory.stats()
    if (this.stream !== null) stats.redis = Object.assign({ ready: this.stream.ready, degraded: this.degraded }, this.sender.stats())
    return stats
  }

  /** Close the Redis connections (shutdown). */
  close () {
    this.closed = true
    const stream = this.stream
    this.stream = null
    return stream === null ? Promise.resolve() : stream.close()
  }
}

module.exports = { RedisLog }
