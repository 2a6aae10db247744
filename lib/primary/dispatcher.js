'use strict'

/**
 * The primary's own acceptor for 'rr' and 'sticky' scheduling. Like
 * node:cluster's round robin, it takes each accepted TCP handle straight from
 * the listening handle (no net.Socket is built, no byte is read, so TLS
 * passes through untouched) and hands it to a worker over IPC:
 * - 'rr': round robin over ready workers, preferring those that have
 *   acknowledged every connection handed so far, skipping any whose heartbeat
 *   says its event loop is overloaded (never all of them);
 * - 'sticky': rendezvous hashing of the client address over stable slots.
 */

const net = require('net')
const debug = require('debug')('clusterize:scheduling')
const protocol = require('../protocol')
const { pickRendezvous } = require('./rendezvous')

/** Connections held while no worker is ready (boot, crash of the only worker). */
const MAX_PENDING = 1024

/** What the dispatcher tracks per worker. */
class Handoffs {
  constructor () {
    /** Connections handed to it, in all. */
    this.total = 0
    /** Handed but not yet acknowledged by the worker. */
    this.unacknowledged = 0
    /** Handles still being written to it. */
    this.inFlight = new Set()
  }
}

/**
 * @param {{ mode: 'rr'|'sticky', port: number, host?: string }} options
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {{ isOverloaded: (record: object) => boolean }} health
 */
function createDispatcher (options, supervisor, health) {
  const byRecord = new Map()
  const pending = []
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
    const record = choose(handle)
    if (!record) {
      if (pending.length >= MAX_PENDING || closed) return handle.close()
      pending.push(handle)
      return
    }
    hand(record, handle)
  }

  function choose (handle) {
    const ready = supervisor.readyRecords()
    if (ready.length === 0) return null
    // Stickiness wins over load: moving a client defeats the point.
    if (options.mode === 'sticky') return pickRendezvous(peerAddress(handle), ready, slotOf)
    let healthy = 0
    for (let i = 0; i < ready.length; i++) if (!health.isOverloaded(ready[i])) healthy++
    // Excluding every worker would stall the service; then all take turns.
    const skipOverloaded = healthy > 0 && healthy < ready.length
    // Like node:cluster's free list: prefer a worker that has taken every
    // connection handed to it so far; a worker stuck in a long handler has not.
    let fewest = null
    let fewestCount = Infinity
    for (let i = 0; i < ready.length; i++) {
      cursor = (cursor + 1) % ready.length
      const candidate = ready[cursor]
      if (skipOverloaded && health.isOverloaded(candidate)) continue
      const unacknowledged = handoffsOf(candidate).unacknowledged
      if (unacknowledged === 0) return candidate
      if (unacknowledged < fewestCount) {
        fewest = candidate
        fewestCount = unacknowledged
      }
    }
    return fewest
  }

  /**
   * Send the bare TCP handle with the message, as node:cluster does; our
   * copy of the descriptor is closed once it is written.
   */
  function hand (record, handle) {
    const handoffs = handoffsOf(record)
    handoffs.total++
    handoffs.unacknowledged++
    handoffs.inFlight.add(handle)
    record.channel.postNow(connMessage, handle, function onHanded (err) {
      handoffs.inFlight.delete(handle)
      handle.close()
      if (err) {
        handoffs.unacknowledged--
        debug('handing a connection to worker %d failed: %s', record.id, err.message)
      }
    })
  }

  /** The worker took a connection (its acknowledgement arrived). */
  function onAccepted (record) {
    const handoffs = byRecord.get(record)
    if (handoffs && handoffs.unacknowledged > 0) handoffs.unacknowledged--
  }

  /** A worker died: close the descriptors still queued for it, so those clients are not left hanging. */
  function onWorkerExit (record) {
    const handoffs = byRecord.get(record)
    if (!handoffs) return
    for (const handle of handoffs.inFlight) handle.close()
    handoffs.inFlight.clear()
    byRecord.delete(record)
  }

  function flushPending () {
    while (pending.length > 0) {
      const handle = pending[0]
      const record = choose(handle)
      if (!record) return
      pending.shift()
      hand(record, handle)
    }
  }

  return {
    /** @returns {Promise<import('net').AddressInfo>} */
    listen () {
      const server = net.createServer()
      return new Promise((resolve, reject) => {
        server.once('error', reject)
        server.listen({ port: options.port, host: options.host }, () => {
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
    onAccepted,
    /** Connections handed to this worker so far. */
    connectionsHanded: (record) => (byRecord.has(record) ? byRecord.get(record).total : 0)
  }
}

/** The client's address, read from the bare handle (for 'sticky'). */
function peerAddress (handle) {
  const out = {}
  return handle.getpeername(out) === 0 ? out.address || '' : ''
}

function slotOf (record) {
  return record.id
}

module.exports = { createDispatcher }
