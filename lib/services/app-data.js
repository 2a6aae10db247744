'use strict'

/**
 * Service data that holds the app's values (socket.data, a socket.io
 * packet) is encoded with this process's bus codec: the bus's checks apply
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
 * @param {*} payload what encodeAppData() made, after the IPC channel
 * @returns {*}
 */
function decodeAppData (payload) {
  const codec = busRuntime.core.codec
  if (!codec.isPayload(payload)) throw new TypeError('not a payload of this bus codec')
  return codec.decode(payload)
}

module.exports = { encodeAppData, decodeAppData }
