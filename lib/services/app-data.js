'use strict'

/**
 * Service data that holds the app's values (socket.data, a socket.io
 * packet) is checked by this process's bus codec: the bus's checks apply
 * (bus.maxMessageBytes, what bus.serialization can carry) and are thrown
 * synchronously, where the caller can handle them, instead of failing the
 * IPC write that carries other messages too.
 */

const { busRuntime } = require('../bus/runtime')

/**
 * @param {string} what names the data in an error (service.method)
 * @param {*} data
 * @returns {string|Buffer|undefined} throws ClusterizeBusError (TOO_LARGE, UNSERIALISABLE)
 */
function encodeAppData (what, data) {
  return busRuntime.core.codec.encode(what, data)
}

/**
 * App data for a call over IPC: checked as encodeAppData() checks it, but
 * with bus.serialization 'json' left as it is (the IPC channel encodes the
 * envelope once; `encoded` false, nothing to decode on the other side).
 * @param {string} what
 * @param {*} data
 * @returns {{ payload: *, bytes: number, encoded: boolean }} throws ClusterizeBusError (TOO_LARGE, UNSERIALISABLE)
 */
function checkAppData (what, data) {
  const codec = busRuntime.core.codec
  const { payload, bytes } = codec.encodeLibrary(what, data)
  return { payload, bytes, encoded: codec.name !== 'json' && payload !== undefined }
}

/**
 * @param {*} payload what encodeAppData() made, after the IPC channel
 * @returns {*}
 */
function decodeAppData (payload) {
  const codec = busRuntime.core.codec
  if (!codec.isPayload(payload)) throw new TypeError('not a payload of this bus codec')
  return codec.decode(payload)
}

module.exports = { encodeAppData, checkAppData, decodeAppData }
