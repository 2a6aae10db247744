'use strict'

/**
 * The primary's own acceptor for 'rr' and 'sticky' scheduling. Like
 * node:cluster's round robin, it takes each accepted TCP handle straight from
 * the listening handle (no net.Socket is built, no byte is read, so TLS
 * passes through untouched) and hands it to a worker over IPC:
 * - 'rr': round robin over ready workers, preferring those with no
 *   connection still on its way to them (see hand()), skipping any whose
 *   heartbeat says its event loop is overloaded (never all of them);
 * - 'sticky': rendezvous hashing of the client address over stable slots;
 *   with `sticky.sid`, the primary reads the request line first and sends
 *   every request of one engine.io (socket.io) session to the worker that
 *   created it (its sid names the slot), new sessions round robin, and the
 *   bytes it read go to the worker with the connection. Plain HTTP only: TLS
 *   must end in front (a proxy), since those bytes are part of the handshake.
 */

const net = require('net')
const debug = require('debug')('clusterize:scheduling')
const protocol = require('../protocol')
const { pickRendezvous } = require('./rendezvous')
const { descriptorOf } = require('./inherit')
const { createDescriptorReserve } = require('../fd-limit')

/**
 * Connections held while no worker is ready (boot, crash of the only worker), at most; fewer
 * when `maxAwaiting` (maxIdleConnections, half the fd limit by default) is lower: each holds a
 * descriptor of the primary's.
 */
const MAX_PENDING = 1024
/** With sid routing: how long a new connection may take to send its request line. */
const FIRST_BYTES_TIMEOUT_MS = 10000
/** An engine.io session id minted by a clusterize worker: w<slot>.<random> (lib/realtime/socket-io-adapter.js). */
const SID_SLOT = /[?&]sid=w(\d+)\./
const REQUEST_LINE = /^[A-Z]+ (\S+) HTTP\/1\.[01]\r\n/

const kPeer = Symbol('clusterize.peer')
const kCounted = Symbol('clusterize.peerCounted')

/** What the dispatcher tracks per worker. */
class Handoffs {
  constructor () {
    /** Connections handed to it, in all. */
    this.total = 0
    /** Handles still on their way to it: written or queued, their write callback not yet called. */
    this.inFlight = new Set()
    /**
     * Of those, how many each peer address has: recorded once half the worker's share is on its
     * way (the address costs a system call), so that at its share a flood from one address
     * fills only its own part (see handoffFull()).
     */
    this.byPeer = new Map()
    /** The sum of byPeer's counts. */
    this.recorded = 0
  }

  /** @param {boolean} recordPeer count the handle's peer address too */
  add (handle, recordPeer) {
    this.inFlight.add(handle)
    if (!recordPeer) return
    const address = handle[kPeer] !== undefined ? handle[kPeer] : peerAddress(handle)
    handle[kPeer] = address
    handle[kCounted] = true
    this.byPeer.set(address, (this.byPeer.get(address) || 0) + 1)
    this.recorded++
  }

  delete (handle) {
    this.inFlight.delete(handle)
    if (handle[kCounted] !== true) return
    handle[kCounted] = false
    const address = handle[kPeer]
    this.recorded--
    const left = this.byPeer.get(address) - 1
    if (left === 0) this.byPeer.delete(address)
    else this.byPeer.set(address, left)
  }

  clear () {
    this.inFlight.clear()
    this.byPeer.clear()
    this.recorded = 0
  }
}

/**
 * @param {{ mode: 'rr'|'sticky', port: number, host?: string, fd?: number, sid?: boolean, maxAwaiting?: number, maxHandoff?: number, log?: object }} options
 *   `fd`: an inherited listening socket to accept on instead of binding the port (upgrade, systemd)
 *   `maxAwaiting`: with sid routing, connections held while they send their
 *   request line, at most (the oldest goes first); default no bound. It also
 *   lowers the bound on connections waiting for a ready worker (the newest
 *   are refused beyond it). `maxHandoff`: handles on their way to workers, at most (shared
 *   out among the ready workers; beyond a worker's share the newest are refused, except from a peer
 *   address that holds less than the mean of those on their way, up to half a share more). `log` is
 *   told once when any of them starts
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {{ isOverloaded: (record: object) => boolean }} health
 */
function createDispatcher (options, supervisor, health) {
  const byRecord = new Map()
  const pending = []
  // Sid routing: sockets still sending their first bytes, oldest first. A
  // flood of silent sockets must not take the primary's descriptors.
  const awaiting = new Set()
  const maxAwaiting = options.maxAwaiting || Infinity
  let awaitingShed = 0
  const maxPending = Math.min(MAX_PENDING, options.maxAwaiting || MAX_PENDING)
  let pendingShed = 0
  // A flood accepted faster than the workers take it must not run the primary out of descriptors:
  // at EMFILE libuv resets every connection in the backlog, and the primary could not fork, log
  // or answer its control socket. So at most `maxHandoff` (half its open-file limit), shared out
  // among the ready workers, are on their way (see handoffCount()).
  const maxHandoff = options.maxHandoff || Infinity
  // Past a worker's share, other peers' connections still go only while the primary is not within its descriptor reserve.
  const descriptors = Number.isFinite(maxHandoff) ? createDescriptorReserve() : null
  let handoffShed = 0
  const connMessage = protocol.conn()
  let listenHandle = null
  let cursor = 0
  let closed = false

  supervisor.on('record:ready', flushPending)
  supervisor.on('record:exit', onWorkerExit)

  function handoffsOf (record) {
    let handoffs = byRecord.get(record)
    if (!handoffs) {
      handoffs = new Handoffs()
      byRecord.set(record, handoffs)
    }
    return handoffs
  }

  function onConnection (err, handle) {
    // A failed accept (EMFILE, a client that reset at once) has no handle.
    if (err || !handle) return debug('accept failed: %s', err)
    if (options.sid) return readRequestLine(handle)
    const ready = supervisor.readyRecords()
    const record = choose(handle, ready)
    if (!record) {
      if (closed) return handle.close()
      if (pending.length >= maxPending) return shedPending(handle)
      pending.push(handle)
      return
    }
    if (handoffFull(record, ready.length, handle)) {
      handle.close()
      return countHandoffShed()
    }
    hand(record, handle, null, ready.length)
  }

  function shareOf (readyCount) {
    return Math.max(1, Math.floor(maxHandoff / Math.max(1, readyCount)))
  }

  /**
   * Each ready worker may have its share of the bound on its way to it: a worker that
   * stopped taking connections (stuck, 'sticky' clients hashed to it) fills only its own share.
   * At its share, a newcomer from a peer address that holds less than the mean of the addresses
   * on their way still goes, up to half as much again and while the primary is not within its
   * descriptor reserve: a reconnecting flood from one address is refused, the other clients of
   * that worker are not.
   * @param {object} handle the newcomer's handle (its address is read only when the share is reached)
   */
  function handoffFull (record, readyCount, handle) {
    const share = shareOf(readyCount)
    const handoffs = handoffsOf(record)
    const size = handoffs.inFlight.size
    if (size < share) return false
    if (size >= share + Math.ceil(share / 2) || (descriptors !== null && descriptors.low())) return true
    const address = handle[kPeer] !== undefined ? handle[kPeer] : peerAddress(handle)
    handle[kPeer] = address
    return (handoffs.byPeer.get(address) || 0) * handoffs.byPeer.size >= handoffs.recorded
  }

  /** Handles on their way to workers: written to a channel, their write callback not come yet. */
  function handoffCount () {
    let count = 0
    for (const handoffs of byRecord.values()) count += handoffs.inFlight.size
    return count
  }

  /**
   * A newcomer was refused (closed by the caller), like by a full listen backlog: the handles
   * already on their way keep their turn.
   */
  function countHandoffShed () {
    if (handoffShed++ === 0 && options.log) {
      options.log.warn('connections arrive faster than the workers take them: refusing new ones while a worker has its share (of half the primary\'s open-file limit) on its way to it')
    }
    debug('refused a connection: %d on their way to workers (%d refused so far)', handoffCount(), handoffShed)
  }

  /**
   * Sid routing: read the first bytes, pick the worker from the request
   * line, hand over the handle with those bytes.
   */
  function readRequestLine (handle) {
    const socket = new net.Socket({ handle, readable: true, writable: true })
    socket.setTimeout(FIRST_BYTES_TIMEOUT_MS, () => socket.destroy())
    socket.on('error', () => socket.destroy())
    socket.once('close', () => awaiting.delete(socket))
    awaiting.add(socket)
    // The handles on their way to workers hold the primary's descriptors too.
    if (awaiting.size + handoffCount() > maxAwaiting) shedAwaiting()
    socket.once('data', function onFirstBytes (head) {
      awaiting.delete(socket)
      socket.pause()
      socket.setTimeout(0)
      const ready = supervisor.readyRecords()
      const record = ready.length === 0 ? null : routeBySid(head.toString('latin1', 0, Math.min(head.length, 4096)), ready, socket.remoteAddress)
      if (!record || closed) return socket.destroy()
      if (socket._handle) socket._handle[kPeer] = socket.remoteAddress || ''
      if (socket._handle && handoffFull(record, ready.length, socket._handle)) {
        socket.destroy()
        return countHandoffShed()
      }
      const raw = detachHandle(socket)
      if (raw !== null) hand(record, raw, protocol.connWithHead(head), ready.length)
    })
  }

  function shedAwaiting () {
    const onTheirWay = handoffCount()
    for (const socket of awaiting) {
      if (awaiting.size + onTheirWay <= maxAwaiting) break
      awaiting.delete(socket)
      socket.destroy()
      if (awaitingShed++ === 0 && options.log) {
        options.log.warn(`more than ${maxAwaiting} connections have not sent their request line: closing the oldest (sticky.sid, option maxIdleConnections)`)
      }
    }
    debug('shed silent connections (%d so far): %d still awaiting their request line', awaitingShed, awaiting.size)
  }

  /** Like a full listen backlog: those already waiting keep their turn, the newcomer is refused. */
  function shedPending (handle) {
    handle.close()
    if (pendingShed++ === 0 && options.log) {
      options.log.warn(`more than ${maxPending} connections are waiting for a ready worker: refusing new ones until one is ready (option maxIdleConnections)`)
    }
    debug('refused a connection: %d already wait for a ready worker (%d refused so far)', pending.length, pendingShed)
  }

  function routeBySid (text, ready, address) {
    const line = REQUEST_LINE.exec(text)
    if (line === null) return pickRendezvous(address || '', ready, slotOf) // not HTTP/1 (TLS...): by address
    const url = line[1]
    if (!url.includes('EIO=')) return pickRendezvous(address || '', ready, slotOf)
    const sid = SID_SLOT.exec(url)
    if (sid !== null) {
      const slot = Number(sid[1])
      for (const record of ready) if (record.id === slot) return record
    }
    // A new engine.io session (or one whose worker is gone): any worker can take it.
    return chooseRoundRobin(ready)
  }

  function choose (handle, ready) {
    if (ready.length === 0) return null
    // Stickiness wins over load: moving a client defeats the point.
    if (options.mode === 'sticky') {
      handle[kPeer] = peerAddress(handle)
      return pickRendezvous(handle[kPeer], ready, slotOf)
    }
    return chooseRoundRobin(ready)
  }

  function chooseRoundRobin (ready) {
    let healthy = 0
    for (let i = 0; i < ready.length; i++) if (!health.isOverloaded(ready[i])) healthy++
    // Excluding every worker would stall the service; then all take turns.
    const skipOverloaded = healthy > 0 && healthy < ready.length
    // Like node:cluster's free list: prefer a worker with no connection on
    // its way to it. A worker stuck in a long handler does not read its IPC
    // channel, so what is handed to it stays in flight (see hand()).
    let fewest = null
    let fewestCount = Infinity
    for (let i = 0; i < ready.length; i++) {
      cursor = (cursor + 1) % ready.length
      const candidate = ready[cursor]
      if (skipOverloaded && health.isOverloaded(candidate)) continue
      const inFlight = handoffsOf(candidate).inFlight.size
      if (inFlight === 0) return candidate
      if (inFlight < fewestCount) {
        fewest = candidate
        fewestCount = inFlight
      }
    }
    return fewest
  }

  /**
   * Send the bare TCP handle with the message, as node:cluster does; our
   * copy of the descriptor is closed once it is written.
   *
   * No acknowledgement of our own travels back: Node's IPC already makes the
   * worker answer every handle (NODE_HANDLE_ACK, sent when its event loop
   * reads the message) and writes the next handle to that worker only after
   * that answer, queueing it until then. So a handle whose write callback has
   * not come yet is one the worker has not taken, or one queued behind a
   * handle it has not taken: the load signal chooseRoundRobin() reads, at
   * the price of no extra message per connection. A worker that cannot take
   * the connection (not serving) closes it; the client sees a reset.
   */
  function hand (record, handle, message, readyCount) {
    const handoffs = handoffsOf(record)
    handoffs.total++
    // Under pressure (half its share on its way), who is on their way counts: see handoffFull().
    handoffs.add(handle, Number.isFinite(maxHandoff) && handoffs.inFlight.size * 2 >= shareOf(readyCount || 1))
    record.channel.postNow(message || connMessage, handle, function onHanded (err) {
      handoffs.delete(handle)
      handle.close()
      if (err) debug('handing a connection to worker %d failed: %s', record.id, err.message)
    })
  }

  /** A worker died: close the descriptors still queued for it, so those clients are not left hanging. */
  function onWorkerExit (record) {
    const handoffs = byRecord.get(record)
    if (!handoffs) return
    for (const handle of handoffs.inFlight) handle.close()
    handoffs.clear()
    byRecord.delete(record)
  }

  function flushPending () {
    while (pending.length > 0) {
      const handle = pending[0]
      const record = choose(handle, supervisor.readyRecords())
      if (!record) return
      pending.shift()
      hand(record, handle, null, supervisor.readyRecords().length)
    }
  }

  return {
    /** @returns {Promise<import('net').AddressInfo>} */
    listen () {
      const server = net.createServer()
      return new Promise((resolve, reject) => {
        server.once('error', reject)
        const where = options.fd !== undefined ? { fd: options.fd } : { port: options.port, host: options.host }
        server.listen(where, () => {
          server.removeListener('error', reject)
          const address = server.address()
          // Take the listening handle over, as node:cluster's round robin does:
          // accepted handles come to us bare, with no net.Socket around them.
          listenHandle = server._handle
          listenHandle.onconnection = onConnection
          server._handle = null
          resolve(address)
        })
      })
    },
    /** Stop accepting: new connections are refused from here on. */
    close () {
      closed = true
      for (const handle of pending.splice(0)) handle.close()
      supervisor.removeListener('record:ready', flushPending)
      supervisor.removeListener('record:exit', onWorkerExit)
      if (!listenHandle) return Promise.resolve()
      const handle = listenHandle
      listenHandle = null
      return new Promise((resolve) => handle.close(resolve))
    },
    /**
     * What the primary holds itself and what it closed for the bounds: connections waiting for
     * a ready worker, (sticky.sid) those still sending their request line, and those on their
     * way to a worker.
     * @returns {{ pending: number, pendingShed: number, awaiting: number, awaitingShed: number, handoff: number, handoffShed: number }}
     */
    status: () => ({ pending: pending.length, pendingShed, awaiting: awaiting.size, awaitingShed, handoff: handoffCount(), handoffShed }),
    /** The listening socket's descriptor (to pass to a new primary), or null. */
    descriptor: () => descriptorOf(listenHandle),
    /** Connections handed to this worker so far. */
    connectionsHanded: (record) => (byRecord.has(record) ? byRecord.get(record).total : 0)
  }
}

/**
 * Take the TCP handle out of a paused socket and retire the socket object.
 * @returns {object|null}
 */
function detachHandle (socket) {
  const handle = socket._handle
  if (!handle) return null
  handle.readStop()
  socket._handle = null
  handle.onread = noop
  socket.destroy()
  return handle
}

function noop () {}

/** The client's address, read from the bare handle (for 'sticky'). */
function peerAddress (handle) {
  const out = {}
  return handle.getpeername(out) === 0 ? out.address || '' : ''
}

function slotOf (record) {
  return record.id
}

module.exports = { createDispatcher }
