'use strict'

/**
 * The worker's side of the service layer: calls and notifications to the
 * primary's services over this worker's ipc.Channel, and their replies.
 *
 * Written once for every service:
 * - ids and a timeout per call;
 * - backpressure: the bytes of the calls sent and not yet answered (as the
 *   caller sized them, plus a fixed overhead each) stay under
 *   bus.maxQueuedBytes; past that a call is refused at once
 *   (ERR_CLUSTERIZE_BUS_BACKPRESSURE) instead of growing both processes'
 *   memory behind a primary that cannot keep up. A reply gives its call's
 *   bytes back, so the bound covers the primary's queue of replies too;
 * - a closed channel (the primary is gone) fails every call at once.
 * Calls of one loop turn share one IPC write (ipc.Channel#post): under load
 * the session store makes many per turn. Notifications are written at once
 * when the channel is idle (ipc.Channel#postSoon) and count towards the
 * channel's queue until the OS takes them.
 *
 * Data is plain data the IPC channel encodes once. Data that holds the app's
 * values (socket.data, a socket.io packet) is encoded by the caller with the
 * bus codec instead (`encoded`): refused synchronously when the bus would
 * refuse it (too large, unserialisable), never breaking the channel's write.
 */

const debug = require('debug')('clusterize:services')
const { SERVICE_OP, service: envelope } = require('../protocol')
const { ClusterizeTimeoutError } = require('../errors')
const { ClusterizeBusError, errorFromWire } = require('../bus/errors')
const { createPendingCalls } = require('./pending-calls')

/** Bytes counted per call on top of what the caller sized (envelope, ids, names). */
const CALL_OVERHEAD_BYTES = 64

/**
 * @param {{ channel: import('../ipc').Channel, maxQueuedBytes: number, onPush?: (service: string, method: string, data: *) => void }} options
 */
function createRemote (options) {
  const channel = options.channel
  const maxQueuedBytes = options.maxQueuedBytes
  let inFlight = 0
  let refused = 0
  /** Calls waiting for the primary's answer, each holding its bytes of inFlight until it is settled. */
  const pending = createPendingCalls({ onTake: function giveBytesBack (call) { inFlight -= call.bytes } })

  return {
    role: 'worker',

    /**
     * @param {string} name service
     * @param {string} method
     * @param {*} data plain data: the IPC channel encodes it once
     * @param {number} timeoutMs
     * @param {number} sizeBytes the caller's estimate of data's size, for backpressure
     * @param {boolean} [encoded] data is the bus codec's encoding (the host decodes it)
     * @param {(err: Error|null) => void} [onWritten] told when the call has been written to the
     *   OS (ipc.Channel#post); never, when the call is refused before it is sent
     * @returns {Promise<*>}
     */
    request (name, method, data, timeoutMs, sizeBytes, encoded, onWritten) {
      const what = `${name}.${method}`
      if (!channel.connected) {
        return Promise.reject(new ClusterizeBusError(`service call ${what}: the IPC channel to the primary is closed`, 'ERR_CLUSTERIZE_BUS_CLOSED'))
      }
      const bytes = (sizeBytes > 0 ? sizeBytes : 0) + CALL_OVERHEAD_BYTES
      if (inFlight + bytes > maxQueuedBytes) {
        refused++
        return Promise.reject(new ClusterizeBusError(
          `service call ${what}: ${inFlight} bytes of calls are already waiting for the primary's answers, over bus.maxQueuedBytes (${maxQueuedBytes}): the primary cannot keep up. Nothing was sent.`,
          'ERR_CLUSTERIZE_BUS_BACKPRESSURE', { queuedBytes: inFlight, limit: maxQueuedBytes }))
      }
      inFlight += bytes
      return pending.add({ bytes, what }, timeoutMs, function timedOut (call) {
        call.reject(new ClusterizeTimeoutError(`service call ${what}: the primary did not answer within ${timeoutMs} ms`))
      }, function send (id) {
        channel.post(envelope.call(id, name, method, data, encoded), onWritten)
      })
    },

    /**
     * Fire and forget (a notification has no answer and no timeout). Throws
     * ERR_CLUSTERIZE_BUS_BACKPRESSURE, sending nothing, when the channel to the
     * primary already holds bus.maxQueuedBytes.
     * @returns {boolean} false when the channel is closed (nothing sent)
     */
    notify (name, method, data, sizeBytes, encoded) {
      if (!channel.connected) {
        debug('notification %s.%s dropped: the IPC channel is closed', name, method)
        return false
      }
      const bytes = (sizeBytes > 0 ? sizeBytes : 0) + CALL_OVERHEAD_BYTES
      const queued = channel.queuedBytes + inFlight
      if (queued + bytes > maxQueuedBytes) {
        refused++
        throw new ClusterizeBusError(
          `service notification ${name}.${method}: ${queued} bytes are already queued towards the primary, over bus.maxQueuedBytes (${maxQueuedBytes}): the primary or the IPC channel cannot keep up. Nothing was sent.`,
          'ERR_CLUSTERIZE_BUS_BACKPRESSURE', { queuedBytes: queued, limit: maxQueuedBytes })
      }
      channel.reserve(bytes)
      channel.postSoon(envelope.notify(name, method, data, encoded))
      return true
    },

    /** An envelope of kind SERVICE from the primary. Malformed ones are ignored. */
    onPrimaryMessage (message) {
      if (message.op === SERVICE_OP.PUSH) {
        if (typeof options.onPush === 'function' && typeof message.s === 'string' && typeof message.m === 'string') options.onPush(message.s, message.m, message.d)
        return
      }
      if (message.op !== SERVICE_OP.REPLY) return
      const entry = pending.take(message.id)
      if (entry === undefined) return
      if (message.ok === true) entry.resolve(message.d)
      else entry.reject(errorFromWire(message.e, `${entry.what} failed in the primary`))
    },

    /** Fail every call still waiting (the channel closed, or shutdown). */
    failAll (reason) {
      pending.failAll(function closed (call) {
        call.reject(new ClusterizeBusError(`service call ${call.what}: ${reason}`, 'ERR_CLUSTERIZE_BUS_CLOSED'))
      })
    },

    status () {
      return { pending: pending.size, inFlightBytes: inFlight, refused }
    }
  }
}

module.exports = { createRemote, CALL_OVERHEAD_BYTES }
