'use strict'

/**
 * A fail-fast client (no offline queue) refuses commands until it is
 * connected: right after the primary starts, and while it reconnects.
 * Commands of the app-state services wait for the connection, bounded, and
 * then go out (and fail) as they would have.
 */

const READY_WAIT_MS = 500
const CONNECTING = new Set(['wait', 'connecting', 'connect'])

/**
 * Resolve when `client` is ready, or after `waitMs` (whichever comes first).
 * @param {object} client an ioredis Redis or Cluster
 * @param {number} [waitMs]
 * @returns {Promise<void>}
 */
function whenReady (client, waitMs) {
  // Waiting helps only while a first connection is under way; through an
  // outage (reconnecting) a command fails at once rather than late.
  if (!CONNECTING.has(client.status)) return Promise.resolve()
  if (waitMs !== undefined && waitMs !== READY_WAIT_MS) return waitForReady(client, waitMs)
  // One wait per client however many commands come meanwhile (a burst of requests at startup):
  // one 'ready' listener, not one each (Node warns of a leak past ten).
  let shared = sharedWaits.get(client)
  if (shared === undefined) {
    shared = waitForReady(client, READY_WAIT_MS).then(function waited () { sharedWaits.delete(client) })
    sharedWaits.set(client, shared)
  }
  return shared
}

/** @type {WeakMap<object, Promise<void>>} */
const sharedWaits = new WeakMap()

function waitForReady (client, waitMs) {
  return new Promise(function readyOrTimeout (resolve) {
    const timer = setTimeout(done, waitMs)
    if (timer.unref) timer.unref()
    client.once('ready', done)
    function done () {
      clearTimeout(timer)
      client.removeListener('ready', done)
      resolve()
    }
  })
}

module.exports = { whenReady, READY_WAIT_MS }
