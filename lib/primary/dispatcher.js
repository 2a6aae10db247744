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
    let candidates = ready
    const healthy = ready.filter(isHealthy)
    // Excluding every worker would stall the service; then all take turns.
    if (healthy.length > 0) candidates = healthy
    if (options.mode === 'sticky') {
      return pickRendezvous(socket.remoteAddress || '', candidates, slotOf)
    }
    cursor = (cursor + 1) % candidates.length
    return candidates[cursor]
  }

  function hand (record, socket) {
    record.connections++
    record.channel.postNow(connMessage, socket, function onHanded (err) {
      if (err) {
        debug('handing a connection to worker %d failed: %s', record.id, err.message)
        socket.destroy()
      }
    })
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
      return new Promise((resolve) => server.close(() => resolve()))
    }
  }
}

function isHealthy (record) {
  return !record.overloaded
}

function slotOf (record) {
  return record.id
}

module.exports = { createDispatcher }
