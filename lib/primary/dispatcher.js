'use strict'

/**
 * The primary's own acceptor for 'rr' and 'sticky' scheduling. It accepts
 * connections paused (no bytes read, so TLS passes through untouched) and
 * hands each socket to a worker over IPC:
 * - 'rr': round robin over ready workers, skipping any whose heartbeat says
 *   its event loop is overloaded (never all of them);
 * - 'sticky': rendezvous hashing of the client address over stable slots.
 */

const net = require('net')
const debug = require('debug')('clusterize:scheduling')
const ipc = require('../ipc')
const { pickRendezvous } = require('./rendezvous')

/** Connections held while no worker is ready (boot, crash of the only worker). */
const MAX_PENDING = 1024

/**
 * @param {{ mode: 'rr'|'sticky', port: number, host?: string }} options
 * @param {import('./supervisor').Supervisor} supervisor
 */
function createDispatcher (options, supervisor) {
  const server = net.createServer({ pauseOnConnect: true }, onConnection)
  const pending = []
  const connMessage = ipc.envelope('conn')
  let cursor = 0
  let closed = false

  supervisor.on('record:ready', flushPending)
  supervisor.on('record:exit', onWorkerExit)
  server.on('error', (err) => debug('acceptor error: %s', err.message))

  function onConnection (socket) {
    const record = choose(socket)
    if (!record) {
      if (pending.length >= MAX_PENDING || closed) return socket.destroy()
      pending.push(socket)
      return
    }
    hand(record, socket)
  }

  function choose (socket) {
    const ready = supervisor.readyRecords()
    if (ready.length === 0) return null
    // Stickiness wins over load: moving a client defeats the point.
    if (options.mode === 'sticky') return pickRendezvous(socket.remoteAddress || '', ready, slotOf)
    const healthy = ready.filter(isHealthy)
    // Excluding every worker would stall the service; then all take turns.
    const candidates = healthy.length > 0 ? healthy : ready
    // Like node:cluster's free list: prefer a worker that has taken every
    // connection handed to it so far; a worker stuck in a long handler has not.
    let fewest = null
    for (let i = 0; i < candidates.length; i++) {
      cursor = (cursor + 1) % candidates.length
      const candidate = candidates[cursor]
      if (candidate.pendingHandoffs === 0) return candidate
      if (fewest === null || candidate.pendingHandoffs < fewest.pendingHandoffs) fewest = candidate
    }
    return fewest
  }

  /**
   * Send the bare TCP handle, as node:cluster does: sending the net.Socket
   * would make Node track it across processes (an extra IPC message per
   * connection). Our copy of the descriptor is closed once it is written.
   */
  function hand (record, socket) {
    const handle = detachHandle(socket)
    if (handle === null) return
    record.connections++
    record.pendingHandoffs++
    record.handoffs.add(handle)
    record.channel.postNow(connMessage, handle, function onHanded (err) {
      record.handoffs.delete(handle)
      handle.close()
      if (err) {
        record.pendingHandoffs--
        debug('handing a connection to worker %d failed: %s', record.id, err.message)
      }
    })
  }

  /** The worker took a connection (its acknowledgement arrived). */
  function onAccepted (record) {
    if (record.pendingHandoffs > 0) record.pendingHandoffs--
  }

  /** A worker died: close the descriptors still queued for it, so those clients are not left hanging. */
  function onWorkerExit (record) {
    for (const handle of record.handoffs) handle.close()
    record.handoffs.clear()
  }

  function flushPending () {
    while (pending.length > 0) {
      const socket = pending.shift()
      if (socket.destroyed) continue
      const record = choose(socket)
      if (!record) {
        pending.unshift(socket)
        return
      }
      hand(record, socket)
    }
  }

  return {
    server,
    /** @returns {Promise<import('net').AddressInfo>} */
    listen () {
      return new Promise((resolve, reject) => {
        server.once('error', reject)
        server.listen({ port: options.port, host: options.host }, () => {
          server.removeListener('error', reject)
          resolve(server.address())
        })
      })
    },
    /** Stop accepting: new connections are refused from here on. */
    close () {
      closed = true
      for (const socket of pending.splice(0)) socket.destroy()
      supervisor.removeListener('record:ready', flushPending)
      supervisor.removeListener('record:exit', onWorkerExit)
      return new Promise((resolve) => server.close(() => resolve()))
    },
    onAccepted
  }
}

/**
 * Take the TCP handle out of a paused socket and retire the socket object
 * (destroy() keeps the server's connection count right).
 */
function detachHandle (socket) {
  const handle = socket._handle
  if (!handle) return null
  socket._handle = null
  handle.onread = noop
  socket.destroy()
  return handle
}

function noop () {}

function isHealthy (record) {
  return !record.overloaded
}

function slotOf (record) {
  return record.id
}

module.exports = { createDispatcher }
