'use strict'

/** Loopback ports for tests. */

const net = require('net')
const { eventually } = require('./wait')

/** @returns {Promise<number>} a loopback port that was free a moment ago */
function freePort () {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

/** @returns {Promise<boolean>} whether a TCP connection to 127.0.0.1:port succeeds */
function canConnect (port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => { socket.destroy(); resolve(false) })
  })
}

/** Resolve once something accepts connections on 127.0.0.1:port. */
function waitForPort (port, { timeoutMs = 5000, what = `a listener on port ${port}` } = {}) {
  return eventually(() => canConnect(port), { timeoutMs, what })
}

/**
 * net.ipv4.tcp_migrate_req (Linux 5.14+): connections queued on a closing SO_REUSEPORT socket
 * move to one that stays open instead of being reset (docs/operations.md). .ci/run sets it.
 * @returns {boolean}
 */
function tcpMigrateReq () {
  try {
    return require('fs').readFileSync('/proc/sys/net/ipv4/tcp_migrate_req', 'utf8').trim() === '1'
  } catch {
    return false
  }
}

module.exports = { freePort, canConnect, waitForPort, tcpMigrateReq }
