'use strict'

/**
 * socket.io connection-state recovery across workers: the worker's side of
 * ./recovery-service.js (read that first), behind socket.io-adapter's
 * ClusterAdapter API, as socket.io's own Redis-streams adapter does it.
 *
 * - doPublish() of a broadcast sends it to the primary, which numbers it and
 *   sends it to every worker, this one included: that copy tells this worker
 *   the offset, which doPublish() returns (ClusterAdapter#broadcast then
 *   delivers it here with the offset appended); the other workers get it
 *   through ClusterAdapter#onMessage(message, offset). Every worker delivers
 *   a namespace's packets in the primary's order (./recovery-order.js).
 * - A socket cut with a recoverable reason is persisted in the primary (a
 *   request: the old worker waits for the answer before it exits), and the
 *   worker the client reconnects to restores it from there.
 * - The primary also holds a copy of every connected socket's session, sent
 *   once the app's 'connection' handlers ran and after each join or leave:
 *   if this worker dies without persisting (kill -9, OOM), the primary
 *   persists that copy instead.
 * - A restore answers with the packets up to the primary's head at that
 *   moment; the packets this worker delivers meanwhile (after the head) are
 *   added from what it saw while the restore was in flight, so the client
 *   gets each packet once whichever way the messages raced.
 */

const debug = require('debug')('clusterize:socket.io')
const { serviceClient, runtimeConfig } = require('../services')
const { onConnectionsClosed } = require('../lifecycle')
const { SERVICE } = require('./recovery-service')
const { shouldInclude, compareIds } = require('./recovery-log')
const { createDeliveryOrder, HOLD } = require('./recovery-order')
const { privateSessionIdOf, serverOptionsOf } = require('./socketio-internals')
const { watchRestoringClients } = require('./restoring-clients')
const { withBinaries, restoreBinaries } = require('./binary')

/**
 * Is the packet numbered `seq` after `head`? Numbers (this host's log) or
 * stream ids (bus.redis: '<ms>-<n>'); a packet of the other kind (Redis
 * became unreachable or came back meanwhile) was not in the answer: after.
 */
function isAfter (seq, head) {
  if (typeof seq === 'number' && typeof head === 'number') return seq > head
  if (typeof seq === 'string' && typeof head === 'string') return compareIds(seq, head) > 0
  return true
}

/** How many packets a restore in flight may see go by before it gives up (the client then connects afresh). */
const MAX_SEEN_DURING_RESTORE = 100000
const PERSIST_TIMEOUT_MS = 10000
/** A broadcast whose numbered copy has not come back by then is delivered here without an offset (ClusterAdapter's own fallback). */
const PUBLISH_TIMEOUT_MS = 10000

/** The primary's recovery service (./recovery-service.js). */
const primary = serviceClient(SERVICE)

/** Service data holding the app's values: encoded with the bus codec (see lib/services/app-data.js). */
const ENCODE = Object.freeze({ encode: true })

/** Adapters with recovery in this process, for the drain. */
const adapters = new Set()
let drainHookAdded = false

/**
 * Recovery for one adapter (one namespace).
 * @param {object} adapter the ClusterizeAdapter
 * @param {{ maxPackets?: number, maxSessions?: number, liveWaitMs?: number }} options
 */
function createRecovery (adapter, options) {
  const nsp = adapter.nsp
  const name = nsp.name
  const settings = serverOptionsOf(nsp.server).connectionStateRecovery
  // The primary's wait comes from clusterize()'s recovery option unless createAdapter() gave one (deprecated).
  const liveWaitMs = options.liveWaitMs === undefined ? runtimeConfig().recovery.liveWaitMs : options.liveWaitMs
  /** Restores in flight: each collects the numbered packets delivered meanwhile. */
  const restoring = new Set()
  /** Persist requests in flight (the drain waits for them). */
  const persisting = new Set()
  /** pids persisted by this worker whose 'disconnect' has not fired yet. */
  const persistedPids = new Set()
  /** Restored sessions whose socket has not connected yet: pid -> the watch on its connection. */
  const awaitingConnect = new Map()
  const restoringClients = watchRestoringClients(nsp)
  const order = createDeliveryOrder()
  /** @type {Map<number, { resolve: Function, reject: Function, timer: object }>} this worker's broadcasts waiting for their offset */
  const publishing = new Map()
  let publishId = 0

  send({ op: 'cfg', n: name, d: settings.maxDisconnectionDuration, p: options.maxPackets, x: options.maxSessions, l: options.liveWaitMs })

  function onConnection (socket) {
    const pid = privateSessionIdOf(socket)
    if (pid === null) return
    const waiting = awaitingConnect.get(pid)
    if (waiting !== undefined) {
      awaitingConnect.delete(pid)
      waiting.conn.off('close', waiting.onClose)
    }
    // Reported once the app's 'connection' handlers ran: with the rooms and socket.data they set.
    changed(socket.id)
    socket.once('disconnect', function onDisconnect () {
      if (persistedPids.delete(pid)) return
      send({ op: 'gone', n: name, s: pid })
    })
  }
  nsp.on('connection', onConnection)
  // The adapter's public room events: every join and leave of a socket of this worker.
  const onRoomChange = (room, id) => changed(id)
  adapter.on('join-room', onRoomChange)
  adapter.on('leave-room', onRoomChange)

  /**
   * The primary keeps a copy of each connected socket's session (id, rooms,
   * socket.data) as it changes, so that it can persist it itself when this
   * worker dies without doing so (kill -9, OOM). Changes are coalesced: one
   * message per socket per turn of the event loop.
   */
  const dirty = new Set()
  let flushing = null
  function changed (id) {
    dirty.add(id)
    if (flushing === null) flushing = setImmediate(syncChanged)
  }

  function syncChanged () {
    flushing = null
    for (const id of dirty) {
      const socket = nsp.sockets.get(id)
      const pid = socket === undefined || !socket.connected ? null : privateSessionIdOf(socket)
      if (pid === null) continue
      const live = { op: 'live', n: name, s: pid, w: process.pid }
      // socket.data the bus cannot carry: the primary still knows the socket is here (see restore waits), not its state.
      if (!send(Object.assign({ x: { sid: socket.id, pid, rooms: [...socket.rooms], data: socket.data } }, live), true)) send(live)
    }
    dirty.clear()
  }

  adapters.add(adapter)
  if (!drainHookAdded) {
    drainHookAdded = true
    onConnectionsClosed(persistBeforeExit)
  }

  /**
   * socket.io drops a socket whose connection closed while it was being
   * restored (Namespace#_add: "next called after client was closed"), after
   * the session was taken from the primary: under load that window is wide
   * enough to hit. Put the session back then, so the client's next attempt
   * recovers.
   */
  function putBackIfDropped (conn, stored) {
    if (!conn || typeof conn.once !== 'function') return
    const pid = stored.pid
    if (conn.readyState !== 'open') return sendPersist(stored)
    const onClose = function onClosedWhileRestoring () {
      awaitingConnect.delete(pid)
      debug('recovery: session %s restored on a connection that closed before it connected: put back', pid)
      sendPersist(stored)
    }
    conn.once('close', onClose)
    awaitingConnect.set(pid, { conn, onClose })
  }

  /** Persist a session in the primary; the drain waits for it. */
  function sendPersist (session) {
    let request
    try {
      // socket.data is the app's: encoded (and checked) as a bus message would be.
      request = primary.request('persist', { op: 'persist', n: name, session }, { timeoutMs: PERSIST_TIMEOUT_MS, encode: true })
    } catch (err) {
      // socket.data the bus cannot carry, backpressure: this socket will not be recovered.
      debug('recovery: session %s not persisted: %s', session.pid, err.message)
      return false
    }
    const done = request.then(function persisted () {
      debug('recovery: session %s persisted', session.pid)
    }, function notPersisted (err) {
      debug('recovery: session %s not persisted: %s', session.pid, err.message)
    }).finally(() => persisting.delete(done))
    persisting.add(done)
    return true
  }

  /** A numbered packet is delivered here now: the restores in flight note it (see restore()). */
  function noteDelivered (data) {
    if (typeof data.o !== 'string' || restoring.size === 0) return
    const { packet, opts } = data.m.data
    if (!packet || !Array.isArray(packet.data) || !opts) return
    const seen = { seq: data.q, rooms: opts.rooms, except: opts.except, data: packet.data.concat(data.o) }
    for (const watch of restoring) {
      if (watch.seen.length >= MAX_SEEN_DURING_RESTORE) watch.overflow = true
      else watch.seen.push(seen)
    }
  }

  /**
   * @param {boolean} [appData] data holds the app's values (socket.data): encoded and checked as a bus message
   * @returns {boolean} sent (a refusal, e.g. backpressure, is only traced: these messages are hints)
   */
  function send (data, appData) {
    try {
      return primary.notify(data.op, data, appData ? ENCODE : undefined)
    } catch (err) {
      debug('recovery: %s for %s not sent: %s', data.op, data.s, err.message)
      return false
    }
  }

  return {
    /**
     * ClusterAdapter#doPublish of a broadcast without ack: sent to the
     * primary to be numbered. Throws when the bus would refuse it (too
     * large, unserialisable) or on backpressure.
     * @param {object} message a ClusterMessage
     * @returns {Promise<string|undefined>} the offset (undefined for a packet socket.io does not replay)
     */
    publish (message) {
      const id = ++publishId
      // Its binaries travel beside it (`b`), as in every copy the primary keeps and sends back (./binary.js).
      primary.notify('pub', withBinaries({ op: 'pub', n: name, i: id, m: null }, 'm', message), ENCODE)
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          publishing.delete(id)
          reject(new Error('no offset from the primary in time'))
        }, PUBLISH_TIMEOUT_MS)
        timer.unref()
        publishing.set(id, { resolve, reject, timer })
      })
    },

    /**
     * A cluster message of this namespace from the primary: numbered (`o`,
     * `q`) or not. This worker's own broadcast comes back to settle its
     * doPublish(); any other is handed to ClusterAdapter#onMessage, in order.
     * @param {{ m: object, b?: Array, i?: number, o?: string, q?: number|string }} data `b`: the binaries of `m` (./binary.js)
     */
    receive (data) {
      if (data.b !== undefined) data = Object.assign({}, data, { m: restoreBinaries(data.m, data.b), b: undefined })
      const m = data.m
      if (m.uid === adapter.uid) {
        const waiting = data.i === undefined ? undefined : publishing.get(data.i)
        if (waiting === undefined) return
        publishing.delete(data.i)
        clearTimeout(waiting.timer)
        order.run(function settleOwn () {
          noteDelivered(data)
          waiting.resolve(data.o)
        }, HOLD.OWN)
        return
      }
      order.run(function deliverRemote () {
        noteDelivered(data)
        adapter.onMessage(m, data.o)
      })
    },

    persist (session) {
      if (sendPersist(session)) persistedPids.add(session.pid)
    },

    /**
     * @returns {Promise<object|null>} what socket.io's restoreSession() returns
     */
    async restore (pid, offset) {
      const conn = restoringClients.take(pid)
      const watch = { seen: [], overflow: false }
      restoring.add(watch)
      try {
        const answer = await primary.request('restore', { op: 'restore', n: name, s: pid, o: offset }, { timeoutMs: liveWaitMs + PERSIST_TIMEOUT_MS })
        // In the delivery order: what comes later reaches the socket once socket.io has joined it to its rooms.
        await new Promise((resolve) => order.run(resolve, HOLD.STRICT))
        if (!answer || watch.overflow) return null
        const rooms = answer.session.rooms
        // With bus.redis the offset is the stream entry's id (no epoch).
        // [seq, packet arguments, their binaries (./binary.js)]
        const missedPackets = answer.missed.map(([seq, data, binaries]) => restoreBinaries(data, binaries).concat(answer.epoch === undefined ? seq : `${answer.epoch}:${seq}`))
        // Delivered here after the primary answered (before this socket joined its rooms).
        for (const packet of watch.seen) {
          if (isAfter(packet.seq, answer.head) && shouldInclude(rooms, packet)) missedPackets.push(packet.data.slice())
        }
        debug('recovery: session %s restored with %d missed packets', pid, missedPackets.length)
        putBackIfDropped(conn, answer.session)
        return Object.assign({}, answer.session, { missedPackets })
      } finally {
        restoring.delete(watch)
      }
    },

    /** Sockets still connected and persists in flight (for the drain). */
    get busy () { return nsp.sockets.size + persisting.size },

    settled () { return Promise.allSettled(Array.from(persisting)) },

    close () {
      order.close()
      for (const waiting of publishing.values()) {
        clearTimeout(waiting.timer)
        waiting.reject(new Error('adapter closed'))
      }
      publishing.clear()
      nsp.off('connection', onConnection)
      adapter.off('join-room', onRoomChange)
      adapter.off('leave-room', onRoomChange)
      if (flushing !== null) clearImmediate(flushing)
      flushing = null
      dirty.clear()
      restoringClients.stop()
      adapters.delete(adapter)
    }
  }
}

/**
 * Before a draining worker exits: close what is still connected (long-polling
 * clients, whose HTTP connections are gone) with a recoverable reason, and
 * wait until every session is persisted in the primary, or the deadline.
 */
async function persistBeforeExit ({ deadline }) {
  for (const adapter of adapters) {
    for (const socket of adapter.nsp.sockets.values()) {
      if (socket.conn && typeof socket.conn.close === 'function') socket.conn.close()
    }
  }
  while (Date.now() < deadline) {
    let busy = 0
    for (const adapter of adapters) busy += adapter.recovery.busy
    if (busy === 0) return
    const pending = Array.from(adapters, (adapter) => adapter.recovery.settled())
    await Promise.race([Promise.all(pending), new Promise((resolve) => setTimeout(resolve, 10))])
  }
  debug('recovery: drain deadline passed with sessions not yet persisted')
}

module.exports = { createRecovery }
