'use strict'

/**
 * What the socket.io recovery suites share: the fixture
 * (test/fixtures/socketio-recovery.js), its environment, and the clients and
 * cleanups a file's tests leave, closed after them.
 */

const path = require('path')
const { after } = require('node:test')
const { stopAll } = require('./cluster')

const RECOVERY_FIXTURE = path.join(__dirname, '..', 'fixtures', 'socketio-recovery.js')

/**
 * Call once at the top of a test file: its sockets are disconnected, its
 * cleanups awaited in order, then every cluster it started is stopped.
 * @returns {{ sockets: Array<{ disconnect: Function }>, cleanups: Array<() => unknown> }}
 */
function recoverySuite () {
  const sockets = []
  const cleanups = []
  after(async () => {
    for (const socket of sockets) socket.disconnect()
    for (const cleanup of cleanups) await cleanup()
    await stopAll()
  })
  return { sockets, cleanups }
}

/**
 * The fixture's environment.
 * @param {object} [options] clusterize() options, over a 200 ms heartbeat
 * @param {boolean} [recovery] connectionStateRecovery on (default) or off
 */
function recoveryEnv (options, recovery = true) {
  return {
    DEBUG: process.env.CZ_TEST_DEBUG || '',
    CZ_SIO_RECOVERY: recovery ? '1' : '0',
    // Senders broadcast as fast as acks come back: on a busy box more than the default 10000 packets
    // (recovery.maxPackets) can go by while a client waits for its old worker's persist, and it would
    // then connect as a new socket, by design. These tests are not about that bound.
    CZ_TEST_OPTIONS: JSON.stringify(Object.assign({ health: { heartbeatMs: 200 }, recovery: { maxPackets: 200000 } }, options))
  }
}

module.exports = { RECOVERY_FIXTURE, recoverySuite, recoveryEnv }
