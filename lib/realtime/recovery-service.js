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
 *
 * The files: this one dispatches the workers' messages and requests; the
 * log backend is ./recovery-log.js (one host) or ./recovery-redis.js
 * (bus.redis), one interface; ./recovery-live.js tracks the sockets
 * connected now (restores that race a persist wait there, and the sockets
 * of a worker that dies are persisted from it).
 */

const debug = require('debug')('clusterize:socket.io')
const { isAlive } = require('../process-alive')
const { MemoryLog, NamespaceState, DEFAULTS, shouldInclude } = require('./recovery-log')
const { LiveSockets } = require('./recovery-live')
const { recoveryHandover } = require('./recovery-handover')

/** The service's name (lib/services): workers notify pub, cfg, live, gone and request persist, restore. */
const SERVICE = 'recovery'
/** What this host forwards to the other hosts' primaries (bus.redis): pub. A library channel topic (lib/bus/library.js). */
const QUEUE_TOPIC = 'sio-queue'
/** The notifications and requests a worker sends, by method (each message also carries its op). */
const NOTIFICATIONS = ['pub', 'cfg', 'live', 'gone']
const REQUESTS = ['persist', 'restore']
/** A message of this host's workers: not from another host. */
const FROM_THIS_HOST = Object.freeze({})
/** A namespace's cluster messages to the workers (./socket-io-adapter.js), on the library channel. */
const NAMESPACE_TOPIC_PREFIX = 'sio:'

/** Beyond a draining worker's deadline, before a restore waiting for it gives up. */
const RETIRE_WAIT_MARGIN_MS = 5000

/**
 * The primary's recovery state: a log backend (namespaces, packets,
 * sessions) and the sockets connected right now.
 */
class RecoveryService {
  /**
   * @param {object} bus the library channel (lib/bus/library.js)
   * @param {{ redis?: *, channel?: string, serialization?: 'json'|'advanced', maxMessageBytes?: number, log?: object,
   *   isRetiring?: (workerPid: number) => boolean, retireWaitMs?: number }} [options]
   *   the bus options: with `redis`, the log and sessions live in Redis (shared by every host)
   */
  constructor (bus, options) {
    this.options = options || {}
    const bounds = this.options.bounds || {}
    this.liveWaitMs = bounds.liveWaitMs === undefined ? DEFAULTS.liveWaitMs : bounds.liveWaitMs
    this.live = new LiveSockets()
    const hooks = {
      deliver: (name, message) => {
        bus.broadcast(NAMESPACE_TOPIC_PREFIX + name, message, { scope: 'host' })
        if (this.downstream !== null) this.downstream(name, message)
      },
      forward: (data) => bus.broadcast(QUEUE_TOPIC, data, { scope: 'remote' }),
      bound: (state) => {
        if (this.boundLogged) return
        this.boundLogged = true
        const log = this.options.log
        if (log) {
          log.warn(`socket.io recovery: recovery.maxSessions (${state.maxSessions}) reached in namespace "${state.name}": the oldest disconnected sessions are dropped ` +
            '(their clients reconnect as new sockets). Counted in /stats bounds.recoverySessionsDropped and ' +
            'clusterize_primary_bound_reached_total{bound="recovery_sessions"}; this is logged once.')
        }
      }
    }
    this.boundLogged = false
    this.hooks = hooks
    // A primary upgrade (./recovery-handover.js): the new primary numbers for both and sends the
    // packets down to the old one; it holds broadcasts and restores until the state is here.
    this.downstream = null
    this.held = null
    /** The old primary's worker processes (draining): a restore waits for them as for a retiring worker. */
    this.foreign = new Set()
    this.fromThisHost = FROM_THIS_HOST
    const memory = new MemoryLog(hooks, bounds)
    if (this.options.redis) {
      // Loaded only with bus.redis (it brings ioredis).
      const { RedisLog } = require('./recovery-redis')
      this.log = new RedisLog(memory, hooks, Object.assign({}, this.options, { waitMs: () => this.liveWaitMs }))
    } else {
      this.log = memory
    }
    this.timer = null
    this.closed = false
  }

  /** A new primary replacing another: broadcasts and restores wait until its state is taken over. */
  hold () {
    if (this.held === null) this.held = []
  }

  /** Run what was held, in the order it came. */
  release () {
    const held = this.held
    this.held = null
    if (held === null) return
    for (const run of held) {
      try {
        run()
      } catch (err) {
        debug('recovery: a held call failed: %s', err.message)
      }
    }
  }

  namespace (name) {
    const state = this.log.namespace(name)
    this.startSweeping()
    return state
  }

  /** Expire old packets and sessions even when nothing happens (unref'd: never keeps the primary alive). */
  startSweeping () {
    if (this.timer !== null || this.closed) return
    this.timer = setInterval(() => this.sweep(Date.now()), 10000)
    this.timer.unref()
  }

  sweep (now) {
    // A 'live' that arrived after its worker's exit was handled would be held forever.
    for (const workerPid of this.live.processes()) {
      if (!isAlive(workerPid)) this.forgetProcess(workerPid)
    }
    this.log.sweep(now)
  }

  /** A notification from a worker of this host (meta.host undefined) or a message forwarded by another host. */
  onQueueMessage (data, meta) {
    if (!data || typeof data !== 'object' || typeof data.n !== 'string') return
    if (this.held !== null && data.op === 'pub') return this.held.push(() => this.onQueueMessage(data, meta))
    switch (data.op) {
      case 'pub': return this.publish(data, meta || {})
      case 'cfg': return this.configure(data)
      case 'live': return typeof data.s === 'string' && this.live.mark(data.n, data.s, data.w, data.x)
      case 'gone': return this.live.gone(data.n, data.s)
      default: debug('recovery: ignoring op %o', data.op)
    }
  }

  /** A worker's broadcast ({ n, i, m: a ClusterMessage }) of this host, or forwarded by another host. */
  publish (data, meta) {
    const m = data.m
    if (!m || typeof m !== 'object' || !m.data) return
    this.namespace(data.n)
    this.log.publish(data.n, data, meta)
  }

  /**
   * A worker's socket.io settings for a namespace: maxDisconnectionDuration
   * (socket.io's own option), and createAdapter({ recovery }) bounds when the
   * app gave them (deprecated: clusterize()'s recovery option sets them at
   * startup). The first sets them, later ones can only raise them.
   */
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
   * A worker process exited: the sockets it still held were not persisted
   * (a crash, or a drain cut short). Persist the last state it reported of
   * each, so their clients recover on another worker; the restores waiting
   * for them wake once that is done.
   */
  forgetProcess (workerPid) {
    this.foreign.delete(workerPid)
    const held = this.live.heldBy(workerPid)
    let orphans = 0
    for (const { nsp, pid, session } of held) {
      if (session === undefined || this.closed) {
        this.live.gone(nsp, pid)
        continue
      }
      orphans++
      const persisted = this.persist(nsp, session)
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
    } else if (data.op !== 'restore') {
      throw new TypeError(`recovery: unknown op ${data.op}`)
    }
    if (this.held !== null) {
      return new Promise((resolve, reject) => this.held.push(() => {
        try { resolve(this.onStateRequest(data)) } catch (err) { reject(err) }
      }))
    }
    return this.handleRequest(data)
  }

  /** A checked request, answered here. */
  handleRequest (data) {
    return data.op === 'persist' ? this.persist(data.n, data.session) : this.restore(data.n, data.s, data.o)
  }

  /** Keep a session for recovery; then its socket is no longer live (the restores waiting for it wake). */
  persist (nsp, session) {
    this.namespace(nsp)
    const persisted = this.log.persist(nsp, session)
    if (!(persisted instanceof Promise)) {
      this.live.gone(nsp, session.pid)
      return persisted
    }
    return persisted.then((value) => {
      this.live.gone(nsp, session.pid)
      return value
    })
  }

  /**
   * Restore now, or, while the socket is still connected on its old worker
   * (the client was faster than the old worker's close), once that worker has
   * persisted it (or `liveWaitMs` passes).
   */
  restore (nsp, pid, offset) {
    if (typeof pid !== 'string' || !this.log.has(nsp)) return null
    const holder = this.live.holder(nsp, pid)
    if (holder === undefined || !this.log.knows(nsp, offset)) return this.restoreNow(nsp, pid, offset)
    debug('recovery: restore of %s waits for its old worker to persist it', pid)
    // An old worker that is draining (a reload) will persist the socket or exit, and either
    // wakes this restore: under load that can take longer than liveWaitMs, and giving up
    // early would turn a recoverable client into a new socket. Only a socket still
    // held by a serving worker (the client came back before the server saw it go) waits
    // no longer than liveWaitMs.
    const retiring = this.foreign.has(holder) || (typeof this.options.isRetiring === 'function' && this.options.isRetiring(holder))
    const waitMs = retiring ? Math.max(this.liveWaitMs, this.options.retireWaitMs || 0) : this.liveWaitMs
    return this.live.waitGone(nsp, pid, waitMs).then(() => this.restoreNow(nsp, pid, offset))
  }

  /** The log's answer; a client that will connect as a new socket is traced (the usual cause is a bound). */
  restoreNow (nsp, pid, offset) {
    const answered = (value) => {
      if (value === null) debug('recovery: session %s not restored: unknown, expired, or the packets after its offset %s are no longer all in the log (recovery.maxPackets)', pid, offset)
      return value
    }
    const value = this.log.restore(nsp, pid, offset)
    return value instanceof Promise ? value.then(answered) : answered(value)
  }

  stats () {
    return Object.assign(this.log.stats(), { live: this.live.size })
  }

  /** Close the Redis connections (shutdown). */
  close () {
    this.closed = true
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    return this.log.close()
  }
}

/**
 * The recovery service on `bus` (the primary at startup, or the single
 * process with `workers: 0`): the bus carries the numbered broadcasts to this
 * host's workers and, with bus.redis, what other hosts forward. Cheap until a
 * worker uses it.
 * @param {object} bus the library channel (lib/bus/library.js)
 * @param {object} [options] the bus options and the logger (see RecoveryService)
 * @returns {RecoveryService}
 */
function createRecoveryService (bus, options) {
  const service = new RecoveryService(bus, options)
  const fromOtherHosts = (data, meta) => service.onQueueMessage(data, meta)
  bus.on(QUEUE_TOPIC, fromOtherHosts)
  service.detach = () => bus.off(QUEUE_TOPIC, fromOtherHosts)
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
  return { redis: bus.redis, channel: bus.channel, serialization: bus.serialization, maxMessageBytes: bus.maxMessageBytes, log, isRetiring, retireWaitMs, bounds: config.recovery }
}

/**
 * The service of lib/services/list.js: cheap until a worker's adapter uses it.
 * A worker that exits is forgotten (its sockets' last state is persisted).
 */
const recoveryService = {
  name: SERVICE,
  handover: { crosses: 'handedOver', what: 'the socket.io recovery log and its numbering, the persisted sessions, the sockets the old workers hold; the old workers\' broadcasts are numbered by the new primary' },
  start: function startRecoveryService (context) {
    const service = createRecoveryService(require('../bus/library').libraryChannel, recoveryOptions(context.config, context.log, context.isRetiringPid))
    if (context.upgrading) service.hold()
    const handlers = recoveryHandlers(service)
    handlers.close = () => {
      service.detach()
      return service.close()
    }
    return handlers
  }
}

/**
 * What the service host calls (lib/services/host.js) for one RecoveryService.
 * @param {RecoveryService} service
 */
function recoveryHandlers (service) {
  const notifications = {}
  for (const op of NOTIFICATIONS) {
    notifications[op] = function recoveryNotification (data, caller) {
      // A worker of the old primary of an upgrade (draining): a restore waits for it as for a retiring worker.
      if (caller && caller.passed) service.foreign.add(caller.pid)
      service.onQueueMessage(data, FROM_THIS_HOST)
    }
  }
  const requests = {}
  for (const op of REQUESTS) requests[op] = (data) => service.onStateRequest(data)
  return {
    notifications,
    requests,
    api: service,
    handover: recoveryHandover(service),
    workerExit: (caller) => service.forgetProcess(caller.pid)
  }
}

module.exports = { createRecoveryService, recoveryOptions, recoveryService, recoveryHandlers, SERVICE, RecoveryService, NamespaceState, shouldInclude, QUEUE_TOPIC, NAMESPACE_TOPIC_PREFIX, DEFAULTS }
