'use strict'

/**
 * socket.io connection-state recovery across workers: the worker's side of
 * ./recovery-service.js (read that first).
 *
 * - A broadcast is sent to the primary, which numbers it and sends it back
 *   to every worker (this one included): every worker delivers a namespace's
 *   packets in the primary's order, each event carrying its offset.
 * - A socket cut with a recoverable reason is persisted in the primary (a
 *   request: the old worker waits for the answer before it exits), and the
 *   worker the client reconnects to restores it from there.
 * - The primary also holds a copy of every connected socket's session, sent
 *   at connection and at each join or leave: if this worker dies without
 *   persisting (kill -9, OOM), the primary persists that copy instead.
 * - A restore answers with the packets up to the primary's head at that
 *   moment; the packets this worker delivers meanwhile (after the head) are
 *   added from what it saw while the restore was in flight, so the client
 *   gets each packet once whichever way the messages raced.
 */

const debug = require('debug')('clusterize:socket.io')
const { internalBus } = require('../bus')
const { onConnectionsClosed } = require('../worker/drain-hooks')
const { QUEUE_TOPIC, STATE_TOPIC, DEFAULTS, shouldInclude } = require('./recovery-service')
const { compareIds } = require('./recovery-redis')

/** socket.io's own rule for packets that can be replayed: events without ack, not volatile. */
function isReplayable (packet, opts) {
  return packet.type === 2 && packet.id === undefined && !(opts.flags && opts.flags.volatile)
}

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
  const settings = nsp.server.opts.connectionStateRecovery
  const liveWaitMs = options.liveWaitMs === undefined ? DEFAULTS.liveWaitMs : options.liveWaitMs
  /** Restores in flight: each collects the numbered packets delivered meanwhile. */
  const restoring = new Set()
  /** Persist requests in flight (the drain waits for them). */
  const persisting = new Set()
  /** pids persisted by this worker whose 'disconnect' has not fired yet. */
  const persistedPids = new Set()
  /** Restored sessions whose socket has not connected yet: pid -> the watch on its connection. */
  const awaitingConnect = new Map()
  const restoringClients = watchRestoringClients(nsp)

  internalBus.send('primary', QUEUE_TOPIC, { op: 'cfg', n: name, d: settings.maxDisconnectionDuration, p: options.maxPackets, x: options.maxSessions, l: liveWaitMs })

  function onConnection (socket) {
    if (typeof socket.pid !== 'string') return
    const pid = socket.pid
    const waiting = awaitingConnect.get(pid)
    if (waiting !== undefined) {
      awaitingConnect.delete(pid)
      waiting.conn.off('close', waiting.onClose)
    }
    send({ op: 'live', n: name, s: pid, w: process.pid })
    // Once the app's 'connection' handlers ran: the rooms and socket.data they set.
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
      if (socket === undefined || !socket.connected || typeof socket.pid !== 'string') continue
      send({ op: 'live', n: name, s: socket.pid, w: process.pid, x: { sid: socket.id, pid: socket.pid, rooms: [...socket.rooms], data: socket.data } })
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
      request = internalBus.request(STATE_TOPIC, { op: 'persist', n: name, session }, { timeoutMs: PERSIST_TIMEOUT_MS })
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

  function send (data) {
    try {
      internalBus.send('primary', QUEUE_TOPIC, data)
    } catch (err) {
      debug('recovery: %s for %s not sent: %s', data.op, data.s, err.message)
    }
  }

  return {
    /**
     * Send a broadcast to the primary to be numbered; it comes back to every
     * worker. Throws like internalBus.send (the emit reaches no one).
     */
    publish (packet, opts) {
      internalBus.send('primary', QUEUE_TOPIC, {
        op: 'pub',
        n: name,
        k: isReplayable(packet, opts) ? 1 : 0,
        m: { uid: adapter.uid, packet, opts: { rooms: [...opts.rooms], except: [...opts.except], flags: opts.flags || {} } }
      })
    },

    /**
     * A numbered broadcast from the primary: deliver it to this worker's
     * sockets, its offset appended (what the client keeps).
     * @param {{ m: object, o?: string, q?: number }} message
     * @param {Function} deliverLocally (packet, opts) => void
     */
    deliver (message, deliverLocally) {
      const m = message.m
      if (!m || !m.packet || !m.opts) return
      const packet = m.packet
      if (typeof message.o === 'string' && Array.isArray(packet.data)) {
        packet.data.push(message.o)
        for (const watch of restoring) {
          if (watch.seen.length >= MAX_SEEN_DURING_RESTORE) watch.overflow = true
          else watch.seen.push({ seq: message.q, rooms: m.opts.rooms, except: m.opts.except, data: packet.data })
        }
      }
      deliverLocally(packet, { rooms: new Set(m.opts.rooms), except: new Set(m.opts.except), flags: m.opts.flags })
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
        const answer = await internalBus.request(STATE_TOPIC, { op: 'restore', n: name, s: pid, o: offset }, { timeoutMs: liveWaitMs + PERSIST_TIMEOUT_MS })
        if (!answer || watch.overflow) return null
        const rooms = answer.session.rooms
        // With bus.redis the offset is the stream entry's id (no epoch).
        const missedPackets = answer.missed.map(([seq, data]) => data.concat(answer.epoch === undefined ? seq : `${answer.epoch}:${seq}`))
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
 * The engine.io connection each restore comes on: socket.io calls the
 * adapter's restoreSession(pid, offset) from Namespace#_add(client, auth),
 * which is wrapped here to note the client by the pid in its auth. Without
 * that method (another socket.io version) nothing is noted and nothing changes.
 */
function watchRestoringClients (nsp) {
  const byPid = new Map()
  const add = nsp._add
  if (typeof add === 'function') {
    nsp._add = function addNotingRestore (client, auth, fn) {
      const pid = auth && typeof auth.pid === 'string' && typeof auth.offset === 'string' && client && client.conn ? auth.pid : null
      if (pid === null) return add.call(this, client, auth, fn)
      byPid.set(pid, client.conn)
      try {
        return add.call(this, client, auth, fn)
      } finally {
        // restoreSession() took it in add's synchronous part, or will not: never kept.
        byPid.delete(pid)
      }
    }
  }
  return {
    /** The connection restoring `pid`, once (restoreSession runs synchronously inside _add). */
    take (pid) {
      const conn = byPid.get(pid)
      byPid.delete(pid)
      return conn
    },
    stop () {
      if (typeof add === 'function') nsp._add = add
      byPid.clear()
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

module.exports = { createRecovery, isReplayable }
