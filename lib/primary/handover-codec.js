'use strict'

/**
 * What crosses between the two primaries of an upgrade carries the app's
 * values (session data, socket.io packets, socket.data, a rate-limit key).
 * The upgrade's IPC channel is JSON: with bus.serialization 'advanced' (the
 * workers' channel is then v8's structured clone) a value travels as one v8
 * serialization in base64, so a Date or a Map arrives as it was sent. A
 * value that cannot be read (a v8 format from a newer Node than this one
 * reads, on a downgrade) is dropped with a trace, never thrown.
 */

const v8 = require('v8')
const debug = require('debug')('clusterize:upgrade')

/**
 * @param {*} body
 * @param {'json'|'advanced'} serialization
 * @returns {{ v8: string }|{ j: * }}
 */
function pack (body, serialization) {
  return serialization === 'advanced' ? { v8: v8.serialize(body).toString('base64') } : { j: body }
}

/**
 * @param {*} packed what pack() made, on either side's serialization
 * @returns {*} the body, or undefined when it cannot be read
 */
function unpack (packed) {
  if (!packed || typeof packed !== 'object') return undefined
  if (typeof packed.v8 !== 'string') return packed.j
  try {
    return v8.deserialize(Buffer.from(packed.v8, 'base64'))
  } catch (err) {
    debug('a message from the other primary cannot be read: %s', err.message)
    return undefined
  }
}

module.exports = { pack, unpack }
