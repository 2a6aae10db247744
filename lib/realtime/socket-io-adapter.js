'use strict'

/**
 * socket.io across workers and hosts: `io.adapter(createAdapter())`.
 *
 *   const { createAdapter } = require('clusterize-express/socket.io')
 *   io.adapter(createAdapter())
 *
 * io.emit, rooms, to(room).emit, fetchSockets(), socketsJoin/Leave,
 * disconnectSockets() and serverSideEmit() (with acks) reach every worker,
 * carried by the clusterize bus (no second IPC protocol); with `bus.redis`
 * they reach every host. The cluster logic is socket.io-adapter's own
 * ClusterAdapterWithHeartbeat (the base of @socket.io/cluster-adapter); this
 * file only moves its messages. socket.io stays an optional peer dependency:
 * nothing here is loaded unless this entry point is required.
 *
 * The hops of one io.emit() from worker A to a client on worker B, with
 * bus.serialization 'json' (test/bus-encodes.test.js counts them; with
 * 'advanced' the payload is one v8 Buffer, made once by the bus codec, that
 * each IPC channel copies as bytes):
 *
 *   A  doPublish() wraps socket.io-adapter's ClusterMessage in { t: 'm', m, b? }
 *      (b: binaries, ./binary.js); libraryChannel.broadcast() encodes it with
 *      the bus codec (encode 1: a string, the size and serialisability check
 *      for bus.maxMessageBytes). The worker transport puts the string in
 *      { kind: 'bus', op: 'B', m: [topic, string, ...], n }, inside a 'batch'
 *      envelope when the channel is busy; the IPC channel encodes the envelope
 *      (encode 2: the string is escaped once more).
 *   P  the IPC channel decodes the envelope (decode 1; the payload stays a
 *      string, the primary never parses it) and relays it in
 *      { op: 'M', m: [topic, string, from, generation, ...] } to each other
 *      worker: the IPC channel encodes it once per worker (the string escaped).
 *   B  the IPC channel decodes (decode 1), the bus codec parses the string in
 *      core.deliver() (decode 2); ClusterAdapter#onMessage; socket.io-parser
 *      encodes the packet once for B's clients.
 *   With connectionStateRecovery: A sends the ClusterMessage to the primary as
 *   the recovery service's 'pub' notification, its data the bus codec's string
 *   (2 encodes); the primary decodes it twice (the channel, the codec: the log
 *   needs the packet's rooms and arguments), appends it, encodes the numbered
 *   copy { t: 'm', m, i, o, q } once with the codec and the channel encodes it
 *   once per worker, the sender included (its offset); each worker decodes
 *   twice. It also encoded the pub a second time for the other hosts'
 *   primaries when there were none (no bus.redis): that encode is gone. With
 *   bus.redis, the bridge sends the codec's bytes as they are (no encode).
 *
 * Why the string stays (#24's "one encode per hop" was built, measured and
 * reverted): carrying the object itself inside the IPC envelope makes each
 * hop one encode and one decode, but on Node's JSON channel the primary, which
 * every broadcast crosses, then parses and re-encodes an object where today it
 * passes a string through: 1.5x to 2.4x its JSON work for a small broadcast
 * (bench/bus-envelopes.js). Receivers of large, quote-heavy payloads gain
 * (about half the parse), small ones about nothing; the check for
 * bus.maxMessageBytes becomes a walk in JavaScript instead of one native
 * JSON.stringify (about twice the time); and the app's objects must be written
 * before io.emit() returns (else what the app changes afterwards travels),
 * which ends the per-tick batching of the worker's writes.
 */

const debug = require('debug')('clusterize:socket.io')
const { ClusterizeError, ClusterizeOptionError } = require('../errors')
const { bus, ClusterizeBusError } = require('../bus')
const { libraryChannel } = require('../bus/library')
const { createRecovery } = require('./socket-io-recovery')
const { coalesceWebSocketWrites } = require('./coalesce-writes')
const { serverOptionsOf, clusterMessageType } = require('./socketio-internals')
const { registerEngine } = require('./engines')
const { withBinaries, restoreBinaries } = require('./binary')

const { NAMESPACE_TOPIC_PREFIX: TOPIC_PREFIX } = require('./recovery-service')
const kNamed = Symbol('clusterize.sessionIdsBySlot')

function loadBase () {
  let base
  try {
    base = require('socket.io-adapter')
  } catch (err) {
    throw new ClusterizeError('clusterize-express/socket.io needs socket.io (>= 4.7, with socket.io-adapter >= 2.5.3): npm install socket.io' +
      (err && err.code === 'MODULE_NOT_FOUND' ? '' : ` (${err.message})`), 'ERR_CLUSTERIZE_REALTIME_SOCKETIO_MISSING', { cause: err })
  }
  // socket.io 4.7.0 accepts socket.io-adapter 2.5.2, which has no cluster base class yet.
  if (typeof base.ClusterAdapterWithHeartbeat !== 'function') {
    throw new ClusterizeError('clusterize-express/socket.io needs socket.io-adapter >= 2.5.3 (its ClusterAdapterWithHeartbeat); ' +
      'this install has an older one: npm update socket.io-adapter', 'ERR_CLUSTERIZE_REALTIME_SOCKETIO_MISSING')
  }
  return base
}

/**
 * Make engine.io session ids carry this worker's slot (`w<slot>.<random>`),
 * so that the primary's 'sticky' scheduling with `sticky.sid` sends every
 * long-polling request of a session to the worker that holds it.
 */
function nameSessionsBySlot (engine) {
  if (process.env.CLUSTERIZE_WORKER_ID === undefined || engine[kNamed]) return
  engine[kNamed] = true
  const generate = engine.generateId.bind(engine)
  engine.generateId = async function generateSlotId (req) {
    return `w${process.env.CLUSTERIZE_WORKER_ID}.${await generate(req)}`
  }
}

/**
 * Set up socket.io's engine.io server: sessions named by slot, closed by
 * engine.io when the worker drains, WebSocket writes coalesced (unless
 * `coalesceWrites: false`). The engine exists once the server is attached,
 * right after the adapter is built.
 */
function prepareEngine (server, options) {
  process.nextTick(function prepareEngineOnceAttached () {
    const engine = server && server.engine
    if (!engine) return
    nameSessionsBySlot(engine)
    // A draining worker closes its sessions through engine.io (./engines.js).
    registerEngine(engine)
    if (!(options && options.coalesceWrites === false)) coalesceWebSocketWrites(engine)
  })
}

/** The recovery bounds from createAdapter()'s options (see types/socket.io.d.ts). */
function recoveryOptions (options) {
  const recovery = (options && options.recovery) || {}
  for (const key of ['maxPackets', 'maxSessions']) {
    if (recovery[key] !== undefined && !(Number.isInteger(recovery[key]) && recovery[key] > 0)) {
      throw new ClusterizeOptionError(`clusterize-express/socket.io: createAdapter({ recovery: { ${key} } }) must be an integer > 0, got ${String(recovery[key])}`, `recovery.${key}`)
    }
  }
  if (recovery.liveWaitMs !== undefined && !(Number.isFinite(recovery.liveWaitMs) && recovery.liveWaitMs >= 0)) {
    throw new ClusterizeOptionError(`clusterize-express/socket.io: createAdapter({ recovery: { liveWaitMs } }) must be a number >= 0, got ${String(recovery.liveWaitMs)}`, 'recovery.liveWaitMs')
  }
  return recovery
}

let toldInMemory = false

/**
 * Outside clusterize (a plain `node app.js`, a test) there is no bus to carry
 * the adapter's messages: socket.io's own in-memory adapter serves instead,
 * as if no adapter had been given, unless the user asked for strictness.
 */
function inMemoryAdapter (nsp, strict, base) {
  // A clusterize worker whose bus has not started yet built its Server too early: an in-memory
  // adapter there would silently keep broadcasts on this worker.
  if (process.env.CLUSTERIZE_WORKER_ID !== undefined) {
    throw new ClusterizeBusError('clusterize-express/socket.io: the socket.io Server was created before clusterize() started this worker\'s bus: ' +
      'create it inside the app factory (clusterize(() => createApp())), not when a module is first required', 'ERR_CLUSTERIZE_BUS_NOT_STARTED')
  }
  if (strict) {
    throw new ClusterizeBusError('clusterize-express/socket.io: createAdapter({ strict: true }) is used in a process that is not run by clusterize() ' +
      '(the bus is not running): start the app through clusterize(), or leave strict off to use socket.io\'s in-memory adapter here', 'ERR_CLUSTERIZE_BUS_NOT_STARTED')
  }
  if (!toldInMemory) {
    toldInMemory = true
    debug('not run by clusterize (no bus in this process): socket.io\'s in-memory adapter serves instead')
  }
  // socket.io's default: the session-aware adapter when connectionStateRecovery is on (socket.io-adapter >= 2.5).
  const recovery = serverOptionsOf(nsp.server).connectionStateRecovery
  const InMemory = recovery && typeof base.SessionAwareAdapter === 'function' ? base.SessionAwareAdapter : base.Adapter
  return new InMemory(nsp)
}

/**
 * @param {{ heartbeatInterval?: number, heartbeatTimeout?: number, coalesceWrites?: boolean, strict?: boolean, recovery?: { maxPackets?: number, maxSessions?: number, liveWaitMs?: number } }} [options]
 *   heartbeat*: passed to socket.io-adapter; coalesceWrites: one TCP write per engine.io flush
 *   (default true, see ./coalesce-writes.js); strict: throw ERR_CLUSTERIZE_BUS_NOT_STARTED outside
 *   clusterize instead of using socket.io's in-memory adapter; recovery: bounds of connectionStateRecovery's state in the primary
 * @returns {(nsp: object) => object} what io.adapter() takes
 */
function createAdapter (options) {
  const base = loadBase()
  const { ClusterAdapterWithHeartbeat } = base
  const BROADCAST = clusterMessageType(base, 'BROADCAST')
  for (const key of ['coalesceWrites', 'strict']) {
    if (options && options[key] !== undefined && typeof options[key] !== 'boolean') {
      throw new ClusterizeOptionError(`clusterize-express/socket.io: createAdapter({ ${key} }) must be true or false, got ${String(options[key])}`, key)
    }
  }
  const strict = Boolean(options && options.strict)

  class ClusterizeAdapter extends ClusterAdapterWithHeartbeat {
    constructor (nsp) {
      super(nsp, options || {})
      this.topic = TOPIC_PREFIX + nsp.name
      // socket.io's connectionStateRecovery: broadcasts are numbered by the primary (./socket-io-recovery.js).
      this.recovery = serverOptionsOf(nsp.server).connectionStateRecovery ? createRecovery(this, recoveryOptions(options)) : null
      /** The broadcast doPublish() refused (thrown from broadcast()). */
      this.refused = null
      this.onBusMessage = (data) => {
        if (!data || typeof data !== 'object') return
        if (data.t === 'm' && data.m && this.recovery !== null) {
          this.recovery.receive(data)
        } else if (data.t === 'm' && data.m && data.m.uid !== this.uid) {
          this.onMessage(data.b ? restoreBinaries(data.m, data.b) : data.m)
        } else if (data.t === 'r' && data.to === this.uid) {
          this.onResponse(data.b ? restoreBinaries(data.r, data.b) : data.r)
        }
      }
      libraryChannel.on(this.topic, this.onBusMessage)
      debug('adapter for namespace %s (uid %s)', nsp.name, this.uid)
      prepareEngine(nsp.server, options)
      this.init()
    }

    /**
     * ClusterAdapter's own broadcast: doPublish() puts the message on the bus
     * (or, with recovery, sends it to the primary to be numbered), then the
     * base class delivers it to this worker's sockets one microtask later, as
     * @socket.io/cluster-adapter does. The override only rethrows a refusal:
     * a message the bus refuses (over bus.maxMessageBytes, unserialisable)
     * throws from io.emit() and reaches no one, instead of reaching only this
     * worker's sockets (the base class would log it at debug level).
     */
    broadcast (packet, opts) {
      // doPublish() runs synchronously inside it, before its first await.
      const delivered = super.broadcast(packet, opts)
      const refused = this.refused
      if (refused === null) return delivered
      this.refused = null
      throw refused
    }

    doPublish (message) {
      if (message.type === BROADCAST && message.data.requestId === undefined) {
        try {
          return this.recovery !== null ? this.recovery.publish(message) : this.publishOnBus(message)
        } catch (err) {
          // A promise that never settles keeps ClusterAdapter#broadcast from delivering the
          // packet here; broadcast() throws the error.
          this.refused = err
          return new Promise(function never () {})
        }
      }
      return this.publishOnBus(message)
    }

    /** @returns {Promise<string>} no offset: only the primary numbers broadcasts (with recovery) */
    publishOnBus (message) {
      libraryChannel.broadcast(this.topic, withBinaries({ t: 'm', m: null }, 'm', message))
      return Promise.resolve('')
    }

    doPublishResponse (requesterUid, response) {
      // Every server sees it; only the requester (by uid) takes it.
      libraryChannel.broadcast(this.topic, withBinaries({ t: 'r', to: requesterUid, r: null }, 'r', response))
      return Promise.resolve()
    }

    /** Save a socket cut with a recoverable reason in the primary (connectionStateRecovery). */
    persistSession (session) {
      if (this.recovery !== null) this.recovery.persist(session)
    }

    /** The session of `pid` and the packets it missed after `offset`, from the primary; null if it cannot be restored. */
    restoreSession (pid, offset) {
      return this.recovery !== null ? this.recovery.restore(pid, offset) : Promise.resolve(null)
    }

    close () {
      if (this.recovery !== null) this.recovery.close()
      libraryChannel.off(this.topic, this.onBusMessage)
      return super.close()
    }
  }

  return function clusterizeAdapter (nsp) {
    if (!nsp || typeof nsp.name !== 'string' || !nsp.server || typeof nsp.server.of !== 'function') {
      throw new ClusterizeError('clusterize-express/socket.io: createAdapter() returns what socket.io\'s io.adapter() takes: ' +
        'new Server(httpServer, { adapter: createAdapter() }) or io.adapter(createAdapter()); it was called with something that is not a socket.io namespace',
      'ERR_CLUSTERIZE_REALTIME_NOT_A_NAMESPACE')
    }
    if (bus.role === 'none') return inMemoryAdapter(nsp, strict, base)
    return new ClusterizeAdapter(nsp)
  }
}

module.exports = { createAdapter }
