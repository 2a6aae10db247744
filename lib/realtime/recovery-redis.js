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
 * the latest broadcasts Redis took (RECENT_KEPT) are checked once it is back,
 * and those it no longer holds are sent again, ahead of the rest. A reader
 * drops a second copy of an entry it read (same uid), and a restore skips it.
 * Offsets of the stream given before a packet numbered here cannot replay it:
 * they are not recovered exactly.
 */

const debug = require('debug')('clusterize:socket.io')
const { RedisAvailability } = require('../redis/availability')
const { createRedisStream } = require('./recovery-redis-stream')
const { replayable, shouldInclude, isStreamId, compareIds, PACKET_ARGUMENTS } = require('./recovery-log')
const { binariesUnder } = require('./binary')

/** How many of this host's latest broadcasts Redis took are kept, to send again if Redis comes back without them. */
const RECENT_KEPT = 1000

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
          this.suspectRecent()
          this.unsentDropped = 0
          this.log.warn(`socket.io recovery: Redis (${this.stream.where}) cannot take broadcasts (${cause}): until it can, this host numbers them itself; ` +
            'its clients keep getting them but recover only on this host, and the other hosts get them when Redis takes them again', { prefix: this.stream.prefix })
        } else if (from === 'down') {
          this.log.info(`socket.io recovery: Redis (${this.stream.where}) reachable again: broadcasts go through the shared log`)
        }
        if (up) this.catchUp()
      }
    })
    /** @type {Map<string, Array<{ id: string, wake: Function }>>} restores waiting for the reader to reach an offset */
    this.reaching = new Map()
    /** This host's broadcasts in the order they came: XADDs not answered yet ({ done: false }) and what waits behind them. */
    this.sending = []
    /**
     * This host's latest broadcasts Redis took (at most RECENT_KEPT), with their entry ids: when
     * Redis goes away they become `suspects`, checked once it is back (a Redis that restarts
     * empty loses what the other hosts had not read yet).
     * @type {Array<{ state: object, data: object, uid: string, id: string }>}
     */
    this.recent = []
    /** The `recent` of the last outage, not checked yet. */
    this.suspects = []
    /**
     * Broadcasts numbered here (delivered to this host's workers) that the stream has not
     * taken yet, oldest first: they go to it before any newer broadcast does.
     * @type {Array<{ state: object, data: object, uid: string }>}
     */
    this.unsent = []
    /** Unsent broadcasts dropped at a namespace's maxPackets during this outage (the other hosts never get them). */
    this.unsentDropped = 0
    this.unsentDroppedTotal = 0
    /** The suspects are being checked (XRANGE): broadcasts wait in `unsent`. */
    this.catching = false
    /** Broadcasts in `sending` waiting behind an unanswered XADD (inOrder()). */
    this.queued = 0
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
        onEntry: (name, id, entry) => this.fromStream(name, id, entry),
        onStateChange: (up, cause) => {
          if (up) this.recovered()
          else this.degrade(cause || 'connection lost')
        }
      })
    }
    return this.stream
  }

  /**
   * A broadcast of this host (or, from an earlier clusterize, another host's over the bus
   * bridge). One waiting behind an unanswered XADD waits too, whatever it becomes: an XADD
   * sent now would overtake it.
   */
  publish (name, data, meta) {
    // Another host's packet over the bus bridge (an earlier clusterize forwards its outage's
    // packets that way): once, whichever way it came first.
    if (meta.host !== undefined && typeof data.u === 'string' && this.stream !== null && !this.stream.claim(data.u)) return
    const state = this.namespace(name)
    if (meta.host !== undefined) return this.publishHere(state, data, meta, true)
    if (this.queued > 0) return this.inOrder(() => this.route(state, data, meta))
    this.route(state, data, meta)
  }

  /**
   * A replayable broadcast goes to the stream (the readers deliver it), behind what was
   * numbered here and not sent yet; any other broadcast, and any while Redis is away, is
   * numbered here.
   */
  route (state, data, meta) {
    if (this.stream !== null && replayable(data.m) !== null) {
      if (this.stream.ready && !this.catching && this.unsent.length === 0 && this.suspects.length === 0) return this.publishShared(state, data)
      if (this.stream.ready) this.catchUp()
      else this.degrade('not connected')
      return this.inOrder(() => this.numberHere(state, data))
    }
    this.inOrder(() => this.publishHere(state, data, meta, true))
  }

  /**
   * Run `fn` (a broadcast of this host numbered here) after the XADDs sent before it
   * have answered: one whose XADD fails is numbered here when it does, and a newer
   * broadcast must not overtake it.
   */
  inOrder (fn) {
    if (this.sending.length === 0) return fn()
    this.queued++
    this.sending.push({ done: true, run: fn, queued: true })
  }

  /** Run what waited for the XADDs that have answered, in order. */
  drainSending () {
    while (this.sending.length > 0 && this.sending[0].done) {
      const next = this.sending.shift()
      if (next.queued) this.queued--
      if (next.run !== null) next.run()
    }
    if (this.sending.length === 0 && this.unsent.length > 0) this.catchUp()
  }

  /**
   * A replayable broadcast Redis cannot take now: to this host's workers, and kept with a
   * uid for the stream (the other hosts get it from there, in order, once Redis takes it).
   * What Redis took before it and this host's reader has not delivered yet goes first.
   */
  numberHere (state, data) {
    this.deliverUnread()
    const uid = typeof data.u === 'string' ? data.u : this.stream.mint()
    const marked = data.u === uid ? data : Object.assign({}, data, { u: uid })
    this.publishHere(state, marked, {}, false)
    this.keepUnsent({ state, data: marked, uid })
  }

  /**
   * This host's broadcasts Redis took that its reader has not delivered yet, delivered here
   * now (the reader skips them): a broadcast numbered here must not reach this host's
   * clients before them.
   */
  deliverUnread () {
    const recent = this.recent
    let first = recent.length
    while (first > 0 && !this.stream.wasRead(recent[first - 1].uid)) first--
    for (let i = first; i < recent.length; i++) {
      if (this.stream.claim(recent[i].uid)) this.publishHere(recent[i].state, recent[i].data, {}, false)
    }
  }

  /** Keep `item` for the stream, at most a namespace's maxPackets (the oldest go first, counted). */
  keepUnsent (item) {
    this.unsent.push(item)
    const state = item.state
    let count = 0
    for (const kept of this.unsent) if (kept.state === state) count++
    if (count <= state.maxPackets) return
    const oldest = this.unsent.findIndex((kept) => kept.state === state)
    this.unsent.splice(oldest, 1)
    this.unsentDroppedTotal++
    if (this.unsentDropped++ === 0) {
      this.log.warn(`socket.io recovery: more than recovery.maxPackets (${state.maxPackets}) broadcasts of namespace "${state.name}" wait for Redis: ` +
        'the oldest are not sent to the other hosts (this host delivered them). Counted in /stats bounds.recoveryUnsentDropped and ' +
        'clusterize_primary_bound_reached_total{bound="recovery_unsent"}; logged once per outage')
    }
  }

  /**
   * Redis went away: what it took lately may be lost with it (a restart without persistence)
   * before every host read it. This host delivers now the ones its own reader had not
   * reached (its reader skips them if Redis kept them); all of them are checked once Redis
   * is back, and those it lost go to the stream again.
   */
  suspectRecent () {
    if (this.recent.length === 0 || this.stream === null) return
    debug('recovery: Redis went away: %d recent broadcasts to check once it is back', this.recent.length)
    this.deliverUnread()
    for (const item of this.recent) this.suspects.push(item)
    this.recent = []
  }

  /**
   * Redis takes broadcasts again: the suspects it lost, then what was numbered here, go to
   * the stream in order, ahead of any newer broadcast (which waits in `unsent` meanwhile).
   */
  catchUp () {
    const stream = this.stream
    if (this.catching || this.closed || stream === null || !stream.ready || this.sending.length > 0) return
    if (this.unsent.length === 0 && this.suspects.length === 0) return
    this.catching = true
    const suspects = this.suspects
    this.suspects = []
    this.lostOf(stream, suspects).then((lost) => {
      this.catching = false
      if (this.stream !== stream) return
      const items = lost.concat(this.unsent)
      this.unsent = []
      debug('recovery: Redis is back: %d broadcasts (%d it lost) to the stream before the newer ones', items.length, lost.length)
      for (const item of items) this.sendAgain(stream, item)
    }, (err) => {
      this.catching = false
      debug('recovery: cannot check what Redis kept: %s', err.message)
      this.suspects = suspects.concat(this.suspects)
      if (this.stream === stream) this.degrade(err.message)
    })
  }

  /** @returns {Promise<object[]>} the suspects the stream no longer holds, in order */
  async lostOf (stream, suspects) {
    const byName = new Map()
    for (const item of suspects) {
      const group = byName.get(item.state.name)
      if (group === undefined) byName.set(item.state.name, [item])
      else group.push(item)
    }
    const kept = new Set()
    for (const [name, group] of byName) {
      const uids = await stream.kept(name, group[0].id, group[group.length - 1].id)
      for (const uid of uids) kept.add(uid)
    }
    return suspects.filter((item) => !kept.has(item.uid))
  }

  /** XADD a broadcast this host delivered already, with its uid; if Redis fails it, it waits for the next catch-up. */
  sendAgain (stream, item) {
    const { state, data, uid } = item
    let appended
    try {
      stream.skip(uid)
      appended = stream.append(state.name, entryOf(data), state.maxPackets, uid)
    } catch (err) {
      debug('recovery: packet not added to the stream again: %s', err.message)
      return
    }
    const slot = { done: false, run: null }
    this.sending.push(slot)
    appended.added.then((id) => {
      if (this.degraded && this.stream === stream) this.recovered()
      this.remember({ state, data, uid, id })
    }, (err) => {
      if (this.stream !== stream) return
      this.degrade(err.message)
      slot.run = () => this.keepUnsent(item)
    }).then(() => {
      slot.done = true
      this.drainSending()
    }).catch((err) => debug('recovery: after sending again: %s', err.message))
  }

  publishHere (state, data, meta, forward) {
    const numbered = this.memory.publish(state.name, data, meta, forward)
    if (numbered && this.stream !== null) {
      // Offsets of the stream given before this packet cannot replay it: not recovered exactly anymore.
      state.mixed = true
      state.streamFloor = this.stream.lastDelivered(state.name)
    }
  }

  /** A broadcast Redis took, with its entry id: checked if Redis goes away. */
  remember (item) {
    this.recent.push(item)
    if (this.recent.length > RECENT_KEPT) this.recent.shift()
  }

  /** XADD the packet; if Redis fails it, number it here after all (skipped if it shows up in the stream anyway). */
  publishShared (state, data) {
    const stream = this.stream
    let appended
    try {
      appended = stream.append(state.name, entryOf(data), state.maxPackets)
    } catch (err) {
      debug('recovery: packet not added to the stream: %s', err.message)
      return this.inOrder(() => this.publishHere(state, data, {}, true))
    }
    const slot = { done: false, run: null }
    this.sending.push(slot)
    appended.added.then((id) => {
      // An outage seen as failed XADDs ends with one that works (the connection may never have closed).
      if (this.degraded && this.stream === stream) this.recovered()
      this.remember({ state, data, uid: appended.uid, id })
    }, (err) => {
      stream.skip(appended.uid)
      if (this.stream !== stream) return // closed meanwhile (shutdown)
      this.degrade(err.message)
      // It may have reached the stream after all, or not (Redis restarted without it): numbered
      // here, and sent again with its uid; a host that read it already drops the copy.
      slot.run = () => this.numberHere(state, Object.assign({}, data, { u: appended.uid }))
    }).catch((err) => debug('recovery: fallback delivery failed: %s', err.message)).then(() => {
      slot.done = true
      this.drainSending()
    }).catch((err) => debug('recovery: delivery after a failed XADD failed: %s', err.message))
  }

  /** An entry of the shared stream, in stream order: to this host's workers (entry null: skipped, only the position moves). */
  fromStream (name, id, entry) {
    const state = this.memory.namespaces.get(name)
    if (state === undefined) return
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
    if (this.stream !== null) stats.redis = { ready: this.stream.ready, degraded: this.degraded, unsent: this.unsent.length, unsentDropped: this.unsentDroppedTotal }
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

/** What goes in a stream entry: the message, the sender's id, the binaries (`b`, ./binary.js: every host delivers and replays them). */
function entryOf (data) {
  return data.b === undefined ? { m: data.m, i: data.i } : { m: data.m, i: data.i, b: data.b }
}

module.exports = { RedisLog, RECENT_KEPT }
