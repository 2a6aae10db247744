'use strict'

/**
 * socket.io recovery in the primary: the in-memory log backend, and the
 * rules both backends share (what socket.io replays, which packets a
 * socket's rooms get, how offsets compare). See ./recovery-service.js.
 *
 * The log backend interface, implemented here (one host: the packets are
 * numbered by this primary) and by ./recovery-redis.js (bus.redis: a Redis
 * Stream shared by every host, with this one as its fallback):
 *
 *   has(name)                   the namespace is known here
 *   namespace(name)             its NamespaceState (bounds set by 'cfg'), created on first use
 *   publish(name, data, meta)   number and deliver a worker's broadcast ({ n, i, m, b? })
 *   persist(name, session)      keep a session: true, or a promise of true
 *   restore(name, pid, offset)  { session, missed, head, epoch? } | null, or a promise of it
 *   knows(name, offset)         an offset this log gave (worth waiting for an old worker's persist)
 *   sweep(now)                  expire packets and sessions
 *   stats()                     { namespaces, packets, sessions, ... }
 *   close()                     a promise
 *
 * A broadcast's binaries (Buffers, typed arrays) travel beside it as `b`
 * (./binary.js), whatever the bus serialization: the logs keep them with the
 * packet, deliver them as `b` and replay them as the third item of each
 * missed packet ([offset, arguments, binaries]); the worker puts them back.
 *
 * Deliveries go through the `hooks` the service gives: deliver(name, message)
 * to this host's workers, forward(data) to the other hosts' primaries.
 */

const { binariesUnder } = require('./binary')

/** Where a broadcast ClusterMessage holds the arguments socket.io replays. */
const PACKET_ARGUMENTS = ['data', 'packet', 'data']

const DEFAULTS = {
  maxDisconnectionDuration: 2 * 60 * 1000,
  maxPackets: 10000,
  maxSessions: 100000,
  /** How long a restore waits for the session of a socket still connected elsewhere (its old worker is closing it). */
  liveWaitMs: 5000
}

const STREAM_ID = /^\d{1,16}-\d{1,16}$/

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

/** @returns {boolean} `id` is a Redis stream id (an offset given by ./recovery-redis.js) */
function isStreamId (id) {
  return typeof id === 'string' && STREAM_ID.test(id)
}

/**
 * Compare two stream ids ('<ms>-<seq>').
 * @returns {number} < 0, 0 or > 0
 */
function compareIds (a, b) {
  const dashA = a.indexOf('-')
  const dashB = b.indexOf('-')
  const msA = Number(a.slice(0, dashA))
  const msB = Number(b.slice(0, dashB))
  if (msA !== msB) return msA - msB
  return Number(a.slice(dashA + 1)) - Number(b.slice(dashB + 1))
}

/** One namespace's log of numbered packets and its persisted sessions. */
class NamespaceState {
  /**
   * @param {string} name
   * @param {{ maxPackets?: number, maxSessions?: number }} [bounds] clusterize()'s recovery option
   */
  constructor (name, bounds) {
    this.name = name
    /** Offsets are `<epoch>:<seq>`: an offset from another primary (or an earlier run) never matches. */
    // crypto is loaded here, not at startup: it costs the primary about 0.5 MiB of RSS until socket.io is used.
    this.epoch = require('crypto').randomBytes(6).toString('base64url')
    this.seq = 0
    /** @type {Array<{ seq: number, at: number, rooms: string[], except: string[], data: Array, b?: Array }>} b: the binaries of data */
    this.entries = []
    this.first = 0 // index of the oldest kept entry in `entries`
    /** @type {Map<string, { session: object, expiresAt: number }>} pid -> persisted session */
    this.sessions = new Map()
    this.maxDisconnectionDuration = DEFAULTS.maxDisconnectionDuration
    this.maxPackets = (bounds && bounds.maxPackets) || DEFAULTS.maxPackets
    this.maxSessions = (bounds && bounds.maxSessions) || DEFAULTS.maxSessions
    this.configured = false
    /** Live sessions dropped at maxSessions, and who is told the first time (MemoryLog). */
    this.sessionsDropped = 0
    this.onBound = null
    /** With bus.redis: packets were numbered here (Redis unreachable) since the last stream entry. */
    this.mixed = false
    /** With bus.redis: stream offsets up to this id cannot be recovered exactly (packets were numbered here after them). */
    this.streamFloor = null
  }

  get size () { return this.entries.length - this.first }

  offsetOf (seq) { return `${this.epoch}:${seq}` }

  /**
   * Keep a packet; returns its offset.
   * @param {Array} [binaries] those of the packet's arguments (./binary.js), paths relative to packet.data
   */
  append (packet, opts, now, binaries) {
    const seq = ++this.seq
    const entry = { seq, at: now, rooms: opts.rooms || [], except: opts.except || [], data: packet.data }
    if (binaries !== undefined) entry.b = binaries
    this.entries.push(entry)
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
      // Still live: dropped for the bound (recovery.maxSessions), its client connects as a new socket.
      if (entry.expiresAt >= now) {
        this.sessionsDropped++
        if (this.onBound) this.onBound(this)
      }
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

  /** [seq, data, binaries?] of the packets after `offset` for `rooms`, or null when some are missing (or the offset is not ours). */
  missedAfter (offset, rooms) {
    const after = this.seqOf(offset)
    if (after === null) return null
    // The packets right after the offset must still be here, or some would be missing.
    const oldest = this.size > 0 ? this.entries[this.first].seq : this.seq + 1
    if (after + 1 < oldest) return null
    const missed = []
    for (let i = this.first + Math.max(0, after + 1 - oldest); i < this.entries.length; i++) {
      const packet = this.entries[i]
      if (shouldInclude(rooms, packet)) missed.push(packet.b === undefined ? [packet.seq, packet.data] : [packet.seq, packet.data, packet.b])
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

/** The log backend of one host: numbered here, kept in this process. */
class MemoryLog {
  /**
   * @param {{ deliver: (name: string, message: object) => void, forward: (data: object) => void }} hooks
   * @param {{ maxPackets?: number, maxSessions?: number }} [bounds] every namespace's, until a worker's adapter raises them
   */
  constructor (hooks, bounds) {
    this.hooks = hooks
    this.bounds = bounds
    /** @type {Map<string, NamespaceState>} */
    this.namespaces = new Map()
  }

  has (name) { return this.namespaces.has(name) }

  namespace (name) {
    let state = this.namespaces.get(name)
    if (state === undefined) {
      state = new NamespaceState(name, this.bounds)
      if (this.hooks.bound) state.onBound = this.hooks.bound
      this.namespaces.set(name, state)
    }
    return state
  }

  /**
   * Number the packet here if socket.io replays it, send it to this host's
   * workers (`i` lets the sender match its own and return the offset from
   * doPublish()), and to the other hosts to number if `forward`.
   * @returns {boolean} it was numbered
   */
  publish (name, data, meta, forward = true) {
    const state = this.namespace(name)
    const m = data.m
    const kept = replayable(m)
    const message = { t: 'm', m, i: data.i }
    if (data.b !== undefined) message.b = data.b
    if (kept !== null) {
      message.o = state.append(kept.packet, kept.opts, Date.now(), binariesUnder(data.b, PACKET_ARGUMENTS))
      message.q = state.seq
    }
    this.hooks.deliver(name, message)
    if (forward && meta.host === undefined) this.hooks.forward(data)
    return kept !== null
  }

  persist (name, session) {
    this.namespace(name).persist(session, Date.now())
    return true
  }

  restore (name, pid, offset) {
    const state = this.namespaces.get(name)
    return state === undefined ? null : state.restore(pid, offset, Date.now())
  }

  knows (name, offset) {
    const state = this.namespaces.get(name)
    return state !== undefined && state.seqOf(offset) !== null
  }

  sweep (now) {
    for (const state of this.namespaces.values()) state.trim(now)
  }

  stats () {
    let packets = 0
    let sessions = 0
    let sessionsDropped = 0
    for (const state of this.namespaces.values()) {
      packets += state.size
      sessions += state.sessions.size
      sessionsDropped += state.sessionsDropped
    }
    return { namespaces: this.namespaces.size, packets, sessions, sessionsDropped }
  }

  close () { return Promise.resolve() }
}

module.exports = { MemoryLog, NamespaceState, DEFAULTS, PACKET_ARGUMENTS, replayable, shouldInclude, isSession, isStreamId, compareIds }
