'use strict'

/**
 * Session writes during a primary upgrade (`clusterize upgrade`). The old
 * primary hands its cluster-store sessions to the new one, then keeps
 * serving its draining workers; every write they make is applied here and
 * forwarded to the new primary. The write is answered only once the new
 * primary has applied it too: a client whose save was answered by an old
 * worker may send its next request on a new connection, to a new worker,
 * whose reads go to the new primary.
 */

const debug = require('debug')('clusterize:upgrade')
const { answerWithLeases } = require('../session/leases')

/** A new primary that does not confirm a forwarded write within this long is not waited for. */
const FORWARD_ACK_TIMEOUT_MS = 1000

/**
 * Old primary: forward every session write to `child` until stop().
 * @param {import('child_process').ChildProcess} child the new primary
 * @param {{ onWrite: Function|null }} backend the SessionBackend
 * @param {string} tag the upgrade messages' marker
 * @returns {{ stop: () => void }}
 */
function forwardSessionWrites (child, backend, tag) {
  let seq = 0
  /** @type {Map<number, { resolve: Function, timer: NodeJS.Timeout }>} */
  const waiting = new Map()
  function onMessage (message) {
    if (message && message[tag] === 'written' && typeof message.n === 'number') settle(message.n)
  }
  function settle (n) {
    const entry = waiting.get(n)
    if (entry === undefined) return
    waiting.delete(n)
    clearTimeout(entry.timer)
    entry.resolve()
  }
  function settleAll () {
    for (const n of [...waiting.keys()]) settle(n)
  }
  child.on('message', onMessage)
  child.once('disconnect', settleAll)
  backend.onWrite = function forwardWrite (msg) {
    if (!child.connected) return undefined
    const n = ++seq
    return new Promise(function confirmed (resolve) {
      const timer = setTimeout(function unconfirmed () {
        debug('forwarded session write %d: the new primary did not confirm it within %d ms', n, FORWARD_ACK_TIMEOUT_MS)
        settle(n)
      }, FORWARD_ACK_TIMEOUT_MS)
      waiting.set(n, { resolve, timer })
      child.send({ [tag]: 'write', n, msg }, function sent (err) {
        if (err) {
          debug('forwarded session write %d not sent: %s', n, err.message)
          settle(n)
        }
      })
    })
  }
  return {
    stop () {
      backend.onWrite = null
      child.removeListener('message', onMessage)
      child.removeListener('disconnect', settleAll)
      settleAll()
    }
  }
}

/**
 * New primary: apply a write the old primary forwarded, as any other worker's
 * write (a lease a new worker holds on the session is revoked first), then
 * confirm it.
 * @param {{ dispatch: Function, leases: object|null }} backend
 * @param {object} msg the store request
 * @param {() => void} confirm
 */
function applyForwardedWrite (backend, msg, confirm) {
  // No lease for the old primary's workers here: they are not this primary's.
  const write = Object.assign({}, msg)
  delete write.lease
  let applied
  try {
    applied = backend.leases ? answerWithLeases(backend, backend.leases, write, 0) : backend.dispatch(write)
  } catch (err) {
    debug('forwarded session write not applied: %s', err.message)
    return confirm()
  }
  if (applied && typeof applied.then === 'function') {
    applied.then(confirm, function notApplied (err) {
      debug('forwarded session write not applied: %s', err && err.message)
      confirm()
    })
  } else {
    confirm()
  }
}

module.exports = { forwardSessionWrites, applyForwardedWrite, FORWARD_ACK_TIMEOUT_MS }
