'use strict'

/**
 * Encoding of bus payloads. The sender encodes `data` exactly once (a JSON
 * string, or a v8 structured-clone Buffer with serialization 'advanced'); the
 * primary relays that payload untouched to every recipient and each receiver
 * decodes it once. Encoding once also gives the size for the
 * `bus.maxMessageBytes` check for free.
 */

const v8 = require('v8')
const { EventEmitter } = require('events')
const { ClusterizeBusError } = require('./errors')

const MAX_TOPIC_LENGTH = 256
/** The bus's limits when none are given: bus.maxMessageBytes and bus.maxQueuedBytes, with every other option's defaults. */
const { maxMessageBytes: DEFAULT_MAX_MESSAGE_BYTES, maxQueuedBytes: DEFAULT_MAX_QUEUED_BYTES } = require('../config').DEFAULTS.bus
/** Bytes counted per message on top of its payload (topic, envelope). */
const MESSAGE_OVERHEAD_BYTES = 64

/**
 * Throw unless `topic` is a non-empty string of at most 256 characters.
 * @param {*} topic
 * @param {string} method for the message, e.g. 'bus.broadcast'
 */
function checkTopic (topic, method) {
  if (typeof topic !== 'string' || topic.length === 0 || topic.length > MAX_TOPIC_LENGTH) {
    const got = typeof topic === 'string' ? `a string of ${topic.length} characters` : describe(topic)
    throw new ClusterizeBusError(
      `${method}: topic must be a non-empty string of at most ${MAX_TOPIC_LENGTH} characters, got ${got}`,
      'ERR_CLUSTERIZE_BUS_TOPIC', { topic })
  }
}

/**
 * On the wire, the library channel's topics (./library.js) start with this
 * character, which no app topic may start with: the two sets of topics never
 * meet, while sharing the relay, flow control and the Redis bridge.
 */
const LIBRARY_MARK = '\u0000'

/**
 * checkTopic(), for the app's topics: the library channel's wire mark is not one.
 * @param {*} topic
 * @param {string} method
 */
function checkAppTopic (topic, method) {
  checkTopic(topic, method)
  if (topic.charCodeAt(0) === 0) {
    throw new ClusterizeBusError(`${method}: a topic may not start with a NUL character (\\u0000), got ${JSON.stringify(topic)}`,
      'ERR_CLUSTERIZE_BUS_TOPIC', { topic })
  }
}

function describe (value) {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return typeof value === 'object' ? 'an object' : `${typeof value} ${String(value).slice(0, 40)}`
}

/** Raised from inside the JSON replacer; turned into a ClusterizeBusError by encode(). */
class Unserialisable extends Error {}

/**
 * JSON.stringify replacer that refuses what JSON would silently drop or mangle.
 * @this {object} the holder
 */
function jsonGuard (key, value) {
  const type = typeof value
  if (type === 'number' && !Number.isFinite(value)) {
    throw new Unserialisable(`${value}${key === '' ? '' : ` at key "${key}"`} (JSON would turn it into null; send null, a string, or use bus.serialization 'advanced')`)
  }
  if (type === 'function' || type === 'symbol') {
    throw new Unserialisable(`a ${type}${key === '' ? '' : ` at key "${key}"`}`)
  }
  if (type === 'object' && value !== null) {
    if (value instanceof EventEmitter) {
      throw new Unserialisable(`an EventEmitter such as a socket, stream or server${key === '' ? '' : ` at key "${key}"`}`)
    }
    if (value instanceof Map || value instanceof Set) {
      throw new Unserialisable(`a ${value instanceof Map ? 'Map' : 'Set'}${key === '' ? '' : ` at key "${key}"`} (JSON would turn it into {}; use bus.serialization 'advanced')`)
    }
  }
  return value
}

function firstLine (message) {
  const line = String(message).split('\n')[0]
  return line.length > 160 ? line.slice(0, 157) + '...' : line
}

/**
 * @typedef {object} Codec
 * @property {'json'|'advanced'} name
 * @property {number} maxMessageBytes
 * @property {number} maxQueuedBytes
 * @property {(topic: string, data: *, what?: string) => (string|Buffer|undefined)} encode
 * @property {(payload: *) => *} decode
 * @property {(payload: *) => boolean} isPayload
 */

/**
 * @param {{ serialization?: 'json'|'advanced', maxMessageBytes?: number, maxQueuedBytes?: number }} [options]
 * @returns {Codec}
 */
function createCodec (options) {
  const name = (options && options.serialization) || 'json'
  const maxMessageBytes = (options && options.maxMessageBytes) || DEFAULT_MAX_MESSAGE_BYTES
  const maxQueuedBytes = (options && options.maxQueuedBytes) || DEFAULT_MAX_QUEUED_BYTES
  const advanced = name === 'advanced'

  function unserialisable (topic, what, reason) {
    const hint = advanced
      ? 'Send plain data (objects, arrays, strings, numbers, Buffers, Maps, Sets, Dates) and pass ids instead of handles, sockets or functions.'
      : 'Send plain JSON data (objects, arrays, strings, numbers, booleans, null); convert BigInt to strings, break cycles, or set bus.serialization to \'advanced\' for Map/Set/Buffer/Date/BigInt/cycles.'
    return new ClusterizeBusError(
      `bus: cannot serialise the ${what} on topic "${topic}" (serialization '${name}'): it contains ${reason}. ${hint}`,
      'ERR_CLUSTERIZE_BUS_UNSERIALISABLE', { topic })
  }

  function tooLarge (topic, what, size) {
    return new ClusterizeBusError(
      `bus: the ${what} on topic "${topic}" is ${size} bytes once serialised, over the limit of ${maxMessageBytes} bytes (option bus.maxMessageBytes). ` +
      'Send a reference (an id, a key in Redis or a file path) instead, or raise bus.maxMessageBytes.',
      'ERR_CLUSTERIZE_BUS_TOO_LARGE', { topic, size, limit: maxMessageBytes })
  }

  function encodeJson (topic, data, what) {
    let text
    try {
      text = JSON.stringify(data, (typeof data === 'object' && data !== null) || typeof data === 'number' ? jsonGuard : undefined)
    } catch (err) {
      if (err instanceof Unserialisable) throw unserialisable(topic, what, err.message)
      const message = String(err && err.message)
      if (/bigint/i.test(message)) throw unserialisable(topic, what, 'a BigInt')
      if (/circular/i.test(message)) throw unserialisable(topic, what, 'a cycle (an object that refers back to itself)')
      throw unserialisable(topic, what, `a value JSON.stringify refused (${firstLine(message)})`)
    }
    if (text === undefined) throw unserialisable(topic, what, `a ${typeof data}`)
    // UTF-8 needs at most 3 bytes per UTF-16 unit: only measure when it could matter.
    if (text.length * 3 > maxMessageBytes) {
      const size = Buffer.byteLength(text)
      if (size > maxMessageBytes) throw tooLarge(topic, what, size)
    }
    return text
  }

  function encodeAdvanced (topic, data, what) {
    if (typeof data === 'object' && data !== null && data instanceof EventEmitter) {
      throw unserialisable(topic, what, 'an EventEmitter such as a socket, stream or server')
    }
    let buffer
    try {
      buffer = v8.serialize(data)
    } catch (err) {
      throw unserialisable(topic, what, `something structured clone cannot copy (${firstLine(err.message)})`)
    }
    if (buffer.length > maxMessageBytes) throw tooLarge(topic, what, buffer.length)
    return buffer
  }

  return {
    name,
    maxMessageBytes,
    maxQueuedBytes,
    /**
     * Encode once; throws ClusterizeBusError synchronously when the data is
     * unserialisable or larger than bus.maxMessageBytes.
     */
    encode (topic, data, what) {
      if (data === undefined) return undefined
      return advanced ? encodeAdvanced(topic, data, what || 'message') : encodeJson(topic, data, what || 'message')
    },
    decode: advanced ? decodeAdvanced : decodeJson,
    isPayload: advanced ? isBinaryPayload : isTextPayload,
    size: payloadSize
  }
}

function decodeJson (payload) {
  if (payload === undefined || payload === null) return undefined
  return JSON.parse(payload)
}

function decodeAdvanced (payload) {
  if (payload === undefined || payload === null) return undefined
  return v8.deserialize(toBuffer(payload))
}

/**
 * A Buffer that crossed a JSON IPC channel arrives as `{ type: 'Buffer', data: [...] }`.
 * Accept it (slowly) so a mis-configured cluster still works; index.js warns once.
 */
function toBuffer (payload) {
  if (Buffer.isBuffer(payload)) return payload
  if (payload instanceof Uint8Array) return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength)
  if (payload && payload.type === 'Buffer' && Array.isArray(payload.data)) return Buffer.from(payload.data)
  throw new TypeError('not a binary payload')
}

function isTextPayload (payload) {
  return payload === undefined || payload === null || typeof payload === 'string'
}

function isBinaryPayload (payload) {
  return payload === undefined || payload === null || payload instanceof Uint8Array ||
    (typeof payload === 'object' && payload.type === 'Buffer' && Array.isArray(payload.data))
}

function payloadSize (payload) {
  if (payload === undefined || payload === null) return 0
  if (typeof payload === 'string') return Buffer.byteLength(payload)
  if (payload instanceof Uint8Array) return payload.byteLength
  return 0
}

/** Bytes a message counts towards bus.maxQueuedBytes. */
function queuedSize (topic, payload) {
  return payloadSize(payload) + topic.length + MESSAGE_OVERHEAD_BYTES
}

module.exports = { createCodec, checkTopic, checkAppTopic, toBuffer, queuedSize, MAX_TOPIC_LENGTH, LIBRARY_MARK }
