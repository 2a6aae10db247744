'use strict'

/**
 * socket.io connection-state recovery across workers: the primary's side.
 *
 * With `connectionStateRecovery` on, workers do not deliver a broadcast
 * themselves: they send it to the primary ('pub'), which numbers it (a
 * per-namespace sequence, the offset the client keeps), keeps it in a bounded
 * log, and broadcasts it to this host's workers. Every worker, the sender
 * included, delivers the packets of a namespace in that one order, so a
 * client's offset (the last packet it got) says exactly which packets it
 * missed. A socket cut with a recoverable reason (a reload's 1012 close,
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
 * With bus.redis, each host's primary numbers the packets of its own workers
 * and those coming from other hosts ('pub' is forwarded over Redis, the
 * numbered broadcast stays on the host): a client recovers when it
 * reconnects to a worker of the same host.
 */

const debug = require('debug')('clusterize:socket.io')

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

/** Is a packet sent with `opts` meant for a socket in `rooms`? (socket.io-adapter's rule) */
function shouldInclude (rooms, opts) {
  const included = opts.rooms.length === 0 || rooms.some((room) => opts.rooms.includes(room))
  return included && rooms.every((room) => !opts.except.includes(room))
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
    const entry = this.sessions.get(pid)
    if (entry === undefined) return null
    this.sessions.delete(pid)
    if (entry.expiresAt < now) return null
    const after = this.seqOf(offset)
    if (after === null) return null
    // The packets right after the offset must still be here, or some would be missing.
    const oldest = this.size > 0 ? this.entries[this.first].seq : this.seq + 1
    if (after + 1 < oldest) return null
    const rooms = entry.session.rooms
    const missed = []
    for (let i = this.first + Math.max(0, after + 1 - oldest); i < this.entries.length; i++) {
      const packet = this.entries[i]
      if (shouldInclude(rooms, packet)) missed.push([packet.seq, packet.data])
    }
    return { session: entry.session, missed, head: this.seq, epoch: this.epoch }
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
   */
  constructor (bus) {
    this.bus = bus
    /** @type {Map<string, NamespaceState>} */
    this.namespaces = new Map()
    /** @type {Map<string, number>} `${nsp}\n${pid}` -> pid of the worker process holding that socket */
    this.live = new Map()
    /** @type {Map<number, Set<string>>} worker process pid -> its live keys */
    this.liveByProcess = new Map()
    /** @type {Map<string, Array<Function>>} restores waiting for a live socket's persist */
    this.waiting = new Map()
    this.liveWaitMs = DEFAULTS.liveWaitMs
    this.timer = null
  }

  namespace (name) {
    let state = this.namespaces.get(name)
    if (state === undefined) {
      state = new NamespaceState(name)
      this.namespaces.set(name, state)
      this.startSweeping()
    }
    return state
  }

  /** Expire old packets and sessions even when nothing happens (unref'd: never keeps the primary alive). */
  startSweeping () {
    if (this.timer !== null) return
    this.timer = setInterval(() => {
      const now = Date.now()
      for (const state of this.namespaces.values()) state.trim(now)
    }, 10000)
    this.timer.unref()
  }

  /** A fire-and-forget message from a worker of this host (meta.host undefined) or from another host. */
  onQueueMessage (data, meta) {
    if (!data || typeof data !== 'object' || typeof data.n !== 'string') return
    switch (data.op) {
      case 'pub': return this.publish(data, meta)
      case 'cfg': return this.configure(data)
      case 'live': return this.markLive(data.n, data.s, data.w)
      case 'gone': return this.markGone(data.n, data.s)
      default: debug('recovery: ignoring op %o', data.op)
    }
  }

  /** Number the packet (if it is to be kept), send it to this host's workers, and to the other hosts to number. */
  publish (data, meta) {
    const m = data.m
    if (!m || !m.packet || !m.opts) return
    const state = this.namespace(data.n)
    const offset = data.k === 1 ? state.append(m.packet, m.opts, Date.now()) : undefined
    const message = { t: 's', m }
    if (offset !== undefined) {
      message.o = offset
      message.q = state.seq
    }
    this.bus.broadcast('$cz:sio:' + data.n, message, { scope: 'host' })
    if (meta.host === undefined) this.bus.broadcast(QUEUE_TOPIC, data, { scope: 'remote' })
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

  markLive (nsp, pid, workerPid) {
    if (typeof pid !== 'string') return
    const key = nsp + '\n' + pid
    this.live.set(key, workerPid)
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

  /** A worker process exited: its sockets will never be persisted (a crash loses them). */
  forgetProcess (workerPid) {
    const keys = this.liveByProcess.get(workerPid)
    if (keys === undefined) return
    for (const key of Array.from(keys)) {
      const [nsp, pid] = key.split('\n')
      this.markGone(nsp, pid)
    }
  }

  /** Answer a worker's request: 'persist' or 'restore'. */
  onStateRequest (data) {
    if (!data || typeof data !== 'object' || typeof data.n !== 'string') throw new TypeError('recovery: malformed request')
    if (data.op === 'persist') {
      const session = data.session
      if (!session || typeof session.pid !== 'string' || typeof session.sid !== 'string' || !Array.isArray(session.rooms)) throw new TypeError('recovery: malformed session')
      this.namespace(data.n).persist(session, Date.now())
      this.markGone(data.n, session.pid)
      return true
    }
    if (data.op === 'restore') return this.restore(data.n, data.s, data.o)
    throw new TypeError(`recovery: unknown op ${data.op}`)
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
    if (!this.live.has(key) || state.seqOf(offset) === null) return state.restore(pid, offset, Date.now())
    debug('recovery: restore of %s waits for its old worker to persist it', pid)
    return new Promise((resolve) => {
      let waiters = this.waiting.get(key)
      if (waiters === undefined) {
        waiters = []
        this.waiting.set(key, waiters)
      }
      const timer = setTimeout(wake, this.liveWaitMs)
      timer.unref()
      waiters.push(wake)
      function wake () {
        clearTimeout(timer)
        resolve(state.restore(pid, offset, Date.now()))
      }
    })
  }

  stats () {
    let packets = 0
    let sessions = 0
    for (const state of this.namespaces.values()) {
      packets += state.size
      sessions += state.sessions.size
    }
    return { namespaces: this.namespaces.size, packets, sessions, live: this.live.size }
  }
}

/**
 * Answer socket.io recovery traffic on `bus` (the primary at startup, or the
 * single process with `workers: 0`). Idempotent per bus; cheap until a worker
 * uses it.
 * @param {object} bus internalBus
 * @returns {RecoveryService}
 */
function attachRecoveryService (bus) {
  const existing = attached.get(bus)
  if (existing) return existing
  const service = new RecoveryService(bus)
  bus.on(QUEUE_TOPIC, (data, meta) => service.onQueueMessage(data, meta))
  bus.handle(STATE_TOPIC, (data) => service.onStateRequest(data))
  attached.set(bus, service)
  return service
}

module.exports = { attachRecoveryService, RecoveryService, NamespaceState, shouldInclude, QUEUE_TOPIC, STATE_TOPIC, DEFAULTS }
