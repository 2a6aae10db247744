'use strict'

/**
 * Every message kind that travels between the primary and its workers, with
 * a builder for each, so senders and the routing tables agree on one name.
 * The envelope itself (`{ $cz: 1, kind, ...fields }`, batching) is lib/ipc.js.
 *
 *   worker -> primary: READY, HEARTBEAT, BOOT_ERROR, DRAINED, ACCEPTED, BUS
 *   primary -> worker: CONN (with a socket handle), DRAIN, PROMOTE, BUS
 */

const { envelope } = require('./ipc')

const KIND = Object.freeze({
  /** The worker listens (or takes handed connections). `{ address }` */
  READY: 'ready',
  /** Health figures and the session store status. `{ figures, session }` */
  HEARTBEAT: 'heartbeat',
  /** The app failed to build. `{ message, deterministic, stack }` */
  BOOT_ERROR: 'boot-error',
  /** The worker finished draining and is about to exit. `{ timedOut }` */
  DRAINED: 'drained',
  /** The worker took a handed connection (load-aware 'rr'). */
  ACCEPTED: 'accepted',
  /** A connection handed over by the primary's acceptor, as the message's handle. */
  CONN: 'conn',
  /** Stop accepting, finish in-flight work, exit. `{ timeoutMs, reason }` */
  DRAIN: 'drain',
  /** A warm spare takes a slot: start serving as that worker. `{ slot }` */
  PROMOTE: 'promote',
  /** Bus traffic (lib/bus/*), its own ops inside. */
  BUS: 'bus'
})

/** Envelopes without fields are built once. */
const ACCEPTED_MESSAGE = envelope(KIND.ACCEPTED)
const CONN_MESSAGE = envelope(KIND.CONN)

/**
 * One routing table: `routes[kind](context, message, handle)`. Kinds with no
 * route go to `onUnknown`; there is no default forwarding.
 * @param {Object<string, Function>} routes
 * @param {(context: *, message: object) => void} onUnknown
 * @returns {(context: *, message: object, handle?: *) => void}
 */
function createRouter (routes, onUnknown) {
  const table = new Map(Object.entries(routes))
  return function route (context, message, handle) {
    const handler = table.get(message.kind)
    if (handler) handler(context, message, handle)
    else onUnknown(context, message)
  }
}

module.exports = {
  KIND,
  createRouter,
  ready: (address) => envelope(KIND.READY, { address }),
  heartbeat: (figures, session) => envelope(KIND.HEARTBEAT, { figures, session }),
  bootError: (err) => envelope(KIND.BOOT_ERROR, {
    message: String(err && err.message),
    deterministic: Boolean(err && err.appInvalid),
    stack: err && err.stack ? String(err.stack) : undefined
  }),
  drained: (timedOut) => envelope(KIND.DRAINED, { timedOut }),
  drain: (timeoutMs, reason) => envelope(KIND.DRAIN, { timeoutMs, reason }),
  promote: (slot) => envelope(KIND.PROMOTE, { slot }),
  accepted: () => ACCEPTED_MESSAGE,
  conn: () => CONN_MESSAGE
}
