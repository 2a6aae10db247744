'use strict'

/**
 * socket.io connection-state recovery across workers: the primary's side.
 *
 * With `connectionStateRecovery` on, a worker's doPublish() of a broadcast
 * (socket.io-adapter's ClusterMessage) goes to the primary ('pub'), which
 * numbers it (a per-namespace sequence, the offset the client keeps), keeps
 * it in a bounded log, and sends it to this host's workers: the others
 * deliver it (ClusterAdapter#onMessage with the offset), the sender learns
 * its offset from it (what its doPublish() returns). Every worker delivers
 * the packets of a namespace in that one order, so a client's offset (the
 * last packet it got) says exactly which packets it missed. A socket cut with a recoverable reason (a reload's 1012 close,
 * a transport error) is persisted here (rooms, data, ids); the worker the
 * client reconnects to restores it and replays the missed packets of its
 * rooms.
 *
 * Bounds, per namespace: packets are kept for maxDisconnectionDuration and at
 * most `maxPackets` of them; sessions expire after maxDisconnectionDuration,
 * at most `maxSessions` of them (the oldest go first). A client whose offset
 * is older than the log (or from another primary) is not recovered: it
 * connects as a new socket (socket.recovered false), like with socket.io's
 * own in-memory adapter.
 *
 * With bus.redis, the log and the sessions live in Redis instead
 * (./recovery-redis.js): the primary adds a broadcast to the namespace's
 * Redis Stream, and every host's primary reads the stream and sends the
 * entries to its workers, the entry id as the offset. One order for every
 * host, so a client cut from one host recovers on any other. While Redis is
 * unreachable, broadcasts fall back to the numbering above (this host's
 * clients keep getting them and can recover on this host; logged once per
 * outage), and back to the stream when it returns.
 */

const debug = require('debug')('clusterize:socket.io')
const { isAlive } = require('../process-alive')
// Loaded only with bus.redis (it brings ioredis).
const redisLog = () => require('./recovery-redis')

/** Fire-and-forget messages from workers (and other hosts): pub, cfg, live, gone. */
const QUEUE_TOPIC = '$cz:sioq'
/** Requests from workers: persist, restore. */
const STATE_TOPIC = '$cz:sior'

const DEFAULTS = {
  maxDisconnectionDuration: 2 * 60 * 1000,
  maxPackets: 10000,
  maxSessions: 100000,
  /** How long a restore waits for the session of a socket still connected elsewhere (its old worker is closing it). */
  liveWaitMs: 5000
}

const attached = new WeakMap()

/** Beyond a draining worker's deadline, before a restore waiting for it gives up. */
const RETIRE_WAIT_MARGIN_MS = 5000

/**
 * The packet and options of a broadcast ClusterMessage, if socket.io would
 * replay it (socket.io-adapter's rule: an event, no ack, not volatile), else null.
 * @param {object} m a ClusterMessage
 * @returns {{ packet: object, opts: object }|null}
 */
function replayable (m) {
  const data = m && m.type === 3 && m.data
  if (!data || data.requestId !== undefined || !data.packet || !data.opts) return null
  const { packet, opts } = data
  if (packet.type !== 2 || packet.id !== undefined || !Array.isArray(packet.data)) return null
  if (opts.flags && opts.flags.volatile !== undefined) return null
  if (!Array.isArray(opts.rooms) || !Array.isArray(opts.except)) return null
  return data
}

/** Is a packet sent with `opts` meant for a socket in `rooms`? (socket.io-adapter's rule) */
function shouldInclude (rooms, opts) {
  const included = opts.rooms.length === 0 || rooms.some((room) => opts.rooms.includes(room))
  return included && rooms.every((room) => !opts.except.includes(room))
}

/** Is `session` what socket.io's persistSession() is given, for the socket `pid`? */
function isSession (session, pid) {
  return session !== null && typeof session === 'object' && session.pid === pid && typeof session.sid === 'string' &&
    Array.isArray(session.rooms) && session.rooms.every((room) => typeof room === 'string')
}

/** One namespace's log of numbered packets and its persisted sessions. */
class NamespaceState {
  constructor (name) {
    this.name = name
    /** Offsets are `<epoch>:<seq>`: an offset from another primary (or an earlier run) never matches. */
    // crypto is loaded here, not at startup: it costs the primary about 0.5 MiB of RSS until socket.io is used.
    this.epoch = require('crypto').randomBytes(6).toString('base64url')
    this.seq = 0
    /** @type {Array<{ seq: number, at: number, rooms: string[], except: string[], data: Array }>} */
    this.entries = []
    this.first = 0 // index of the oldest kept entry in `entries`
    /** @type {Map<string, { session: object, expiresAt: number }>} pid -> persisted session */
    this.sessions = new Map()
    this.maxDisconnectionDuration = DEFAULTS.maxDisconnectionDuration
    this.maxPackets = DEFAULTS.maxPackets
    this.maxSessions = DEFAULTS.maxSessions
    this.configured = false
    /** With bus.redis: packets were numbered here (Redis unreachable) since the last stream entry. */
    this.mixed = false
    /** With bus.redis: stream offsets up to this id cannot be recovered exactly (packets were numbered here after them). */
    this.streamFloor = null
  }

  get size () { return this.entries.length - this.first }

  offsetOf (seq) { return `${this.epoch}:${seq}` }

  /** Keep a packet; returns its offset. */
  append (packet, opts, now) {
    const seq = ++this.seq
    this.entries.push({ seq, at: now, rooms: opts.rooms || [], except: opts.except || [], data: packet.data })
    this.trim(now)
    return this.offsetOf(seq)
  }

  trim (now) {
    const threshold = now - this.maxDisconnectionDuration
    while (this.size > 0 && (this.size > this.maxPackets || this.entries[this.first].at < threshold)) {
      this.entries[this.first++] = undefined
    }
    if (this.first > 1024 && this.first * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.first)
      this.first = 0
    }
    for (const [pid, entry] of this.sessions) {
      if (entry.expiresAt >= now && this.sessions.size <= this.maxSessions) break
      this.sessions.delete(pid)
    }
  }

  persist (session, now) {
    this.sessions.delete(session.pid) // re-inserted last: the Map stays in expiry order
    this.sessions.set(session.pid, { session, expiresAt: now + this.maxDisconnectionDuration })
    this.trim(now)
  }

  /**
   * The session of `pid` and the packets after `offset` meant for its rooms,
   * or null when it cannot be restored exactly (unknown, expired, offset too old).
   * A session restores once.
   */
  restore (pid, offset, now) {
    const session = this.takeSession(pid, now)
    if (session === null) return null
    const missed = this.missedAfter(offset, session.rooms)
    if (missed === null) return null
    return { session, missed, head: this.seq, epoch: this.epoch }
  }

  /** The persisted session of `pid`, taken out (null if unknown or expired). */
  takeSession (pid, now) {
    const entry = this.sessions.get(pid)
    if (entry === undefined) return null
    this.sessions.delete(pid)
    return entry.expiresAt < now ? null : entry.session
  }

  /** [seq, data] of the packets after `offset` for `rooms`, or null when some are missing (or the offset is not ours). */
  missedAfter (offset, rooms) {
    const after = this.seqOf(offset)
    if (after === null) return null
    // The packets right after the offset must still be here, or some would be missing.
    const oldest = this.size > 0 ? this.entries[this.first].seq : this.seq + 1
    if (after + 1 < oldest) return null
    const missed = []
    for (let i = this.first + Math.max(0, after + 1 - oldest); i < this.entries.length; i++) {
      const packet = this.entries[i]
      if (shouldInclude(rooms, packet)) missed.push([packet.seq, packet.data])
    }
    return missed
  }

  /**
   * With bus.redis: a packet went by that this log does not hold (from the
   * shared stream): no offset of this log can be recovered exactly anymore.
   */
  invalidate () {
    this.seq++
    this.entries = []
    this.first = 0
  }

  /** The sequence number in `offset` if it is one of ours and not in the future, else null. */
  seqOf (offset) {
    if (typeof offset !== 'string') return null
    const colon = offset.lastIndexOf(':')
    if (colon === -1 || offset.slice(0, colon) !== this.epoch) return null
    const seq = Number(offset.slice(colon + 1))
    return Number.isSafeInteger(seq) && seq >= 0 && seq <= this.seq ? seq : null
  }
}

/**
 * The primary's recovery state: namespaces, and the sockets connected right
 * now (so that a restore racing the old worker's persist waits for it).
 */
class RecoveryService {
  /**
   * @param {object} bus internalBus
   * @param {{ redis?: *, channel?: string, serialization?: 'json'|'advanced', maxMessageBytes?: number, log?: object }} [options]
   *   the bus options: with `redis`, the log and sessions live in Redis (shared by every host)
   */
  constructor (bus, options) {
    this.bus = bus
    this.options = options || {}
    /** @type {Map<string, NamespaceState>} */
    this.namespaces = new Map()
    /** @type {Map<string, number>} `${nsp}\n${pid}` -> pid of the worker process holding that socket */
    this.live = new Map()
    /** @type {Map<number, Set<string>>} worker process pid -> its live keys */
    this.liveByProcess = new Map()
    /**
     * @type {Map<string, object>} `${nsp}\n${pid}` -> the session of a live socket as its worker last
     * reported it (id, rooms, socket.data): persisted here if that worker dies without persisting it
     */
    this.shadows = new Map()
    /** @type {Map<string, Array<Function>>} restores waiting for a live socket's persist */
    this.waiting = new Map()
    this.liveWaitMs = DEFAULTS.liveWaitMs
    this.timer = null
    /** With bus.redis (created with the first namespace): the shared log, see ./recovery-redis.js */
    this.redis = null
    /** Redis unreachable and broadcasts numbered here (logged once per outage). */
    this.degraded = false
    /** @type {Map<string, Array<{ id: string, wake: Function }>>} restores waiting for the reader to reach an offset */
    this.reaching = new Map()
    this.closed = false
  }

  get log () {
    return this.options.log || { info () {}, warn () {} }
  }

  namespace (name) {
    let state = this.namespaces.get(name)
    if (state === undefined) {
      state = new NamespaceState(name)
      this.namespaces.set(name, state)
      this.startSweeping()
      if (this.options.redis && !this.closed) this.sharedLog().register(name)
    }
    return state
  }

  /** The Redis log (bus.redis), created on first use: no Redis connection unless recovery is used. */
  sharedLog () {
    if (this.redis === null) {
      this.redis = redisLog().createRedisLog({
        redis: this.options.redis,
        channel: this.options.channel || 'clusterize:bus',
        serialization: this.options.serialization,
        maxMessageBytes: this.options.maxMessageBytes,
        log: this.log,
        onEntry: (name, id, m) => this.fromStream(name, id, m),
        onStateChange: (up) => { if (up) this.recovered() }
      })
    }
    return this.redis
  }

  /** Expire old packets and sessions even when nothing happens (unref'd: never keeps the primary alive). */
  startSweeping () {
    if (this.timer !== null) return
    this.timer = setInterval(() => {
      const now = Date.now()
      // A 'live' that arrived after its worker's exit was handled would be held forever.
      for (const workerPid of Array.from(this.liveByProcess.keys())) {
        if (!isAlive(workerPid)) this.forgetProcess(workerPid)
      }
      for (const state of this.namespaces.values()) {
        state.trim(now)
        if (this.redis !== null) this.redis.trim(state.name, state.maxDisconnectionDuration, now)
      }
    }, 10000)
    this.timer.unref()
  }

  /** A fire-and-forget message from a worker of this host (meta.host undefined) or from another host. */
  onQueueMessage (data, meta) {
    if (!data || typeof data !== 'object' || typeof data.n !== 'string') return
    switch (data.op) {
      case 'pub': return this.publish(data, meta)
      case 'cfg': return this.configure(data)
      case 'live': return this.markLive(data.n, data.s, data.w, data.x)
      case 'gone': return this.markGone(data.n, data.s)
      default: debug('recovery: ignoring op %o', data.op)
    }
  }

  /**
   * A broadcast of a worker of this host, or forwarded by another host. With
   * bus.redis a replayable one of this host goes to the shared stream (the
   * reader sends it to this host's workers, and every other host's reader to
   * theirs); otherwise it is numbered here.
   */
  publish (data, meta) {
    const m = data.m
    if (!m || typeof m !== 'object' || !m.data) return
    const state = this.namespace(data.n)
    if (this.redis !== null && replayable(m) !== null && meta.host === undefined) {
      if (this.redis.ready) return this.publishShared(state, data)
      this.degrade('not connected')
    }
    this.publishHere(state, data, meta, true)
  }

  /** Number the packet here (if it is to be kept), send it to this host's workers, and to the other hosts to number if `forward`. */
  publishHere (state, data, meta, forward) {
    const m = data.m
    const kept = replayable(m)
    const offset = kept !== null ? state.append(kept.packet, kept.opts, Date.now()) : undefined
    // `i` lets the sender's worker match its own broadcast and return the offset from doPublish().
    const message = { t: 'm', m, i: data.i }
    if (offset !== undefined) {
      message.o = offset
      message.q = state.seq
      if (this.redis !== null) {
        // Offsets of the stream given before this packet cannot replay it: not recovered exactly anymore.
        state.mixed = true
        state.streamFloor = this.redis.lastDelivered(state.name)
      }
    }
    this.bus.broadcast('$cz:sio:' + data.n, message, { scope: 'host' })
    if (forward && meta.host === undefined) this.bus.broadcast(QUEUE_TOPIC, data, { scope: 'remote' })
  }

  /** XADD the packet; if Redis fails it, deliver it here after all (skipped if it shows up in the stream anyway). */
  publishShared (state, data) {
    const redis = this.redis
    let appended
    try {
      appended = redis.append(state.name, { m: data.m, i: data.i }, state.maxPackets)
    } catch (err) {
      debug('recovery: packet not added to the stream: %s', err.message)
      return this.publishHere(state, data, {}, true)
    }
    appended.added.then(() => {
      // An outage seen as failed XADDs ends with one that works (the connection may never have closed).
      if (this.degraded && this.redis === redis) this.recovered()
    }, (err) => {
      redis.skip(appended.uid)
      if (this.redis !== redis) return // closed meanwhile (shutdown)
      this.degrade(err.message)
      // Not forwarded: it may have reached the stream (and the other hosts) after all.
      this.publishHere(state, data, {}, false)
    }).catch((err) => debug('recovery: fallback delivery failed: %s', err.message))
  }

  /** An entry of the shared stream, in stream order: to this host's workers (entry null: skipped, only the position moves). */
  fromStream (name, id, entry) {
    const state = this.namespaces.get(name)
    if (state === undefined) return
    if (entry !== null && entry.m) {
      if (state.mixed) {
        state.mixed = false
        state.invalidate()
      }
      this.bus.broadcast('$cz:sio:' + name, { t: 'm', m: entry.m, i: entry.i, o: id, q: id }, { scope: 'host' })
    }
    const waiters = this.reaching.get(name)
    if (waiters === undefined) return
    const { compareIds } = redisLog()
    const still = waiters.filter((waiter) => compareIds(waiter.id, id) > 0 || waiter.wake(true))
    if (still.length === 0) this.reaching.delete(name)
    else this.reaching.set(name, still)
  }

  degrade (cause) {
    if (this.degraded) return
    this.degraded = true
    this.log.warn(`socket.io recovery: Redis (${this.redis.where}) cannot take broadcasts (${cause}): until it can, this host numbers them itself; ` +
      'its clients keep getting them but recover only on this host, and other hosts get them only if the bus bridge is up', { prefix: this.redis.prefix })
  }

  recovered () {
    if (!this.degraded) return
    this.degraded = false
    this.log.info(`socket.io recovery: Redis (${this.redis.where}) reachable again: broadcasts go through the shared log`)
  }

  /** A worker's socket.io settings for a namespace: the first sets them, later ones can only raise them. */
  configure (data) {
    const state = this.namespace(data.n)
    const pick = (current, value) => state.configured ? Math.max(current, value) : value
    if (Number.isFinite(data.d) && data.d > 0) state.maxDisconnectionDuration = pick(state.maxDisconnectionDuration, data.d)
    if (Number.isInteger(data.p) && data.p > 0) state.maxPackets = pick(state.maxPackets, data.p)
    if (Number.isInteger(data.x) && data.x > 0) state.maxSessions = pick(state.maxSessions, data.x)
    if (Number.isFinite(data.l) && data.l >= 0) this.liveWaitMs = data.l
    state.configured = true
  }

  /**
   * A socket is connected on worker process `workerPid`; `session`, when
   * given, is its current state (sent at connection and at each room change).
   */
  markLive (nsp, pid, workerPid, session) {
    if (typeof pid !== 'string') return
    const key = nsp + '\n' + pid
    const holder = this.live.get(key)
    if (holder !== undefined && holder !== workerPid) this.markGone(nsp, pid)
    this.live.set(key, workerPid)
    if (isSession(session, pid)) this.shadows.set(key, session)
    let keys = this.liveByProcess.get(workerPid)
    if (keys === undefined) {
      keys = new Set()
      this.liveByProcess.set(workerPid, keys)
    }
    keys.add(key)
  }

  markGone (nsp, pid) {
    const key = nsp + '\n' + pid
    const workerPid = this.live.get(key)
    if (workerPid === undefined) return
    this.live.delete(key)
    this.shadows.delete(key)
    const keys = this.liveByProcess.get(workerPid)
    if (keys !== undefined) {
      keys.delete(key)
      if (keys.size === 0) this.liveByProcess.delete(workerPid)
    }
    const waiters = this.waiting.get(key)
    if (waiters !== undefined) {
      this.waiting.delete(key)
      for (const wake of waiters) wake()
    }
  }

  /**
   * A worker process exited: the sockets it still held were not persisted
   * (a crash, or a drain cut short). Persist the last state it reported of
   * each, so their clients recover on another worker; the restores waiting
   * for them wake once that is done.
   */
  forgetProcess (workerPid) {
    const keys = this.liveByProcess.get(workerPid)
    if (keys === undefined) return
    let orphans = 0
    for (const key of Array.from(keys)) {
      const [nsp, pid] = key.split('\n')
      const session = this.shadows.get(key)
      if (session === undefined || this.closed) {
        this.markGone(nsp, pid)
        continue
      }
      orphans++
      const persisted = this.persistSession(this.namespace(nsp), session)
      if (persisted instanceof Promise) persisted.catch((err) => debug('recovery: session %s of a dead worker not persisted: %s', pid, err.message))
    }
    if (orphans > 0) debug('recovery: worker %d exited holding %d sockets: their sessions are kept for recovery', workerPid, orphans)
  }

  /** Answer a worker's request: 'persist' or 'restore'. */
  onStateRequest (data) {
    if (!data || typeof data !== 'object' || typeof data.n !== 'string') throw new TypeError('recovery: malformed request')
    if (data.op === 'persist') {
      const session = data.session
      if (!session || typeof session.pid !== 'string' || typeof session.sid !== 'string' || !Array.isArray(session.rooms)) throw new TypeError('recovery: malformed session')
      return this.persistSession(this.namespace(data.n), session)
    }
    if (data.op === 'restore') return this.restore(data.n, data.s, data.o)
    throw new TypeError(`recovery: unknown op ${data.op}`)
  }

  /** Keep a session for recovery (in Redis with bus.redis, else here); then its socket is no longer live. */
  persistSession (state, session) {
    if (this.redis !== null && this.redis.ready) return this.persistShared(state, session)
    state.persist(session, Date.now())
    this.markGone(state.name, session.pid)
    return true
  }

  /** Persist in Redis (any host can restore it); in this primary if Redis fails it. */
  persistShared (state, session) {
    const here = () => {
      state.persist(session, Date.now())
      this.markGone(state.name, session.pid)
      return true
    }
    let persisting
    try {
      persisting = this.redis.persist(state.name, session, state.maxDisconnectionDuration, state.maxSessions)
    } catch (err) {
      debug('recovery: session %s not persisted in Redis: %s', session.pid, err.message)
      return here()
    }
    return persisting.then(() => {
      this.markGone(state.name, session.pid)
      return true
    }, (err) => {
      debug('recovery: session %s not persisted in Redis: %s', session.pid, err.message)
      return here()
    })
  }

  /**
   * Restore now, or, while the socket is still connected on its old worker
   * (the client was faster than the old worker's close), once that worker has
   * persisted it (or `liveWaitMs` passes).
   */
  restore (nsp, pid, offset) {
    if (typeof pid !== 'string') return null
    const state = this.namespaces.get(nsp)
    if (state === undefined) return null
    const key = nsp + '\n' + pid
    const known = state.seqOf(offset) !== null || (this.redis !== null && redisLog().isStreamId(offset))
    if (!this.live.has(key) || !known) return this.restoreNow(state, pid, offset)
    debug('recovery: restore of %s waits for its old worker to persist it', pid)
    return new Promise((resolve) => {
      let waiters = this.waiting.get(key)
      if (waiters === undefined) {
        waiters = []
        this.waiting.set(key, waiters)
      }
      // An old worker that is draining (a reload) will persist the socket or exit, and either
      // wakes this restore: under load that can take longer than liveWaitMs, and giving up
      // early would turn a recoverable client into a new socket. Only a socket still
      // held by a serving worker (the client came back before the server saw it go) waits
      // no longer than liveWaitMs.
      const holder = this.live.get(key)
      const retiring = typeof this.options.isRetiring === 'function' && this.options.isRetiring(holder)
      const timer = setTimeout(wake, retiring ? Math.max(this.liveWaitMs, this.options.retireWaitMs || 0) : this.liveWaitMs)
      timer.unref()
      waiters.push(wake)
      const self = this
      function wake () {
        clearTimeout(timer)
        resolve(self.restoreNow(state, pid, offset))
      }
    })
  }

  restoreNow (state, pid, offset) {
    return this.redis === null ? state.restore(pid, offset, Date.now()) : this.restoreShared(state, pid, offset)
  }

  /**
   * With bus.redis: the session from this primary (persisted while Redis was
   * unreachable) or from Redis (persisted by any host), and the packets
   * after the offset from the stream (or from this primary's log for an
   * offset it gave while Redis was unreachable). Null when not exact.
   */
  async restoreShared (state, pid, offset) {
    const { isStreamId, compareIds } = redisLog()
    const redis = this.redis
    // An offset of neither kind: no restore (and the session is left alone).
    if (!isStreamId(offset) && state.seqOf(offset) === null) return null
    let session = state.takeSession(pid, Date.now())
    if (session === null) {
      if (!redis.ready) return null
      session = await redis.take(state.name, pid)
      if (session === null || !Array.isArray(session.rooms)) return null
    }
    if (!isStreamId(offset)) {
      const missed = state.missedAfter(offset, session.rooms)
      return missed === null ? null : { session, missed, head: state.seq, epoch: state.epoch }
    }
    if (state.streamFloor !== null && compareIds(offset, state.streamFloor) <= 0) return null
    // An offset given by another host may be ahead of this host's reader: wait until it is delivered here.
    if (!(await this.reached(redis, state.name, offset))) return null
    // Up to what this host's workers have been sent: what comes after reaches the restoring worker as usual.
    const head = redis.lastDelivered(state.name)
    const entries = await redis.range(state.name, offset, head)
    // The offset's own entry first, or packets after it were trimmed (or it is no offset of this stream).
    if (entries.length === 0 || entries[0][0] !== offset) return null
    const missed = []
    for (let i = 1; i < entries.length; i++) {
      const kept = entries[i][1] === null ? null : replayable(entries[i][1].m)
      if (kept !== null && shouldInclude(session.rooms, kept.opts)) missed.push([entries[i][0], kept.packet.data])
    }
    return { session, missed, head }
  }

  /** @returns {Promise<boolean>|boolean} this host's reader has delivered the stream entry `id` of `name` (false after liveWaitMs) */
  reached (redis, name, id) {
    const { compareIds } = redisLog()
    const last = redis.lastDelivered(name)
    if (last !== null && compareIds(last, id) >= 0) return true
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        const waiters = this.reaching.get(name) || []
        const index = waiters.indexOf(waiter)
        if (index !== -1) waiters.splice(index, 1)
        resolve(false)
      }, this.liveWaitMs)
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

  stats () {
    let packets = 0
    let sessions = 0
    for (const state of this.namespaces.values()) {
      packets += state.size
      sessions += state.sessions.size
    }
    const stats = { namespaces: this.namespaces.size, packets, sessions, live: this.live.size }
    if (this.redis !== null) stats.redis = { ready: this.redis.ready, degraded: this.degraded }
    return stats
  }

  /** Close the Redis connections (shutdown). */
  close () {
    this.closed = true
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    const redis = this.redis
    this.redis = null
    return redis === null ? Promise.resolve() : redis.close()
  }
}

/**
 * Answer socket.io recovery traffic on `bus` (the primary at startup, or the
 * single process with `workers: 0`). Idempotent per bus; cheap until a worker
 * uses it.
 * @param {object} bus internalBus
 * @param {object} [options] the bus options and the logger (see RecoveryService)
 * @returns {RecoveryService}
 */
function attachRecoveryService (bus, options) {
  const existing = attached.get(bus)
  if (existing) return existing
  const service = new RecoveryService(bus, options)
  bus.on(QUEUE_TOPIC, (data, meta) => service.onQueueMessage(data, meta))
  bus.handle(STATE_TOPIC, (data) => service.onStateRequest(data))
  attached.set(bus, service)
  return service
}

/**
 * What the service needs of the configuration: the bus options (with
 * bus.redis the state lives in Redis), the logger, and how long to wait for
 * a draining worker.
 * @param {{ bus: object, reload?: object, shutdown?: object }} config resolved configuration
 * @param {object} log
 * @param {(workerPid: number) => boolean} [isRetiring] is that worker process draining or stopping?
 */
function recoveryOptions (config, log, isRetiring) {
  const bus = config.bus || {}
  // A draining worker is killed at its deadline at the latest, and its exit wakes the waiters: this is only a backstop.
  const retireWaitMs = Math.max((config.reload && config.reload.drainTimeoutMs) || 0, (config.shutdown && config.shutdown.timeoutMs) || 0) + RETIRE_WAIT_MARGIN_MS
  return { redis: bus.redis, channel: bus.channel, serialization: bus.serialization, maxMessageBytes: bus.maxMessageBytes, log, isRetiring, retireWaitMs }
}

module.exports = { attachRecoveryService, recoveryOptions, RecoveryService, NamespaceState, shouldInclude, replayable, QUEUE_TOPIC, STATE_TOPIC, DEFAULTS }
