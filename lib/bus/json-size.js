'use strict'

/**
 * The size JSON.stringify would give a value, in UTF-8 bytes, found without
 * building the text: the library's messages travel as objects inside the IPC
 * envelope, which the channel encodes once (./codec.js measure()). It walks
 * the value as JSON.stringify does (toJSON, omitted undefined members, null
 * for holes) and refuses what the JSON codec's guard refuses, so a message is
 * checked the same way whether it is encoded here or measured.
 */

const { EventEmitter } = require('events')

/** Raised by the walk; codec.js turns it into ClusterizeBusError ERR_CLUSTERIZE_BUS_UNSERIALISABLE. */
class Unserialisable extends Error {}

// Characters JSON.stringify escapes (control characters, quote, backslash), and lone surrogates.
const ESCAPED = /[\u0000-\u001f"\\]/
const ESCAPED_ALL = /[\u0000-\u001f"\\]/g
const SURROGATE = /[\ud800-\udfff]/
const SHORT_ESCAPES = new Set([8, 9, 10, 12, 13, 34, 92])

function at (key) {
  return key === '' ? '' : ` at key "${key}"`
}

/** Bytes of a string once quoted by JSON.stringify, as UTF-8. */
function stringSize (text) {
  let size = Buffer.byteLength(text) + 2
  if (ESCAPED.test(text)) {
    const matches = text.match(ESCAPED_ALL)
    for (let i = 0; i < matches.length; i++) size += SHORT_ESCAPES.has(matches[i].charCodeAt(0)) ? 1 : 5
  }
  // A lone surrogate is 3 bytes in Buffer.byteLength (U+FFFD) and `\udXXX` (6) in JSON.
  if (SURROGATE.test(text)) {
    for (let i = 0; i < text.length; i++) {
      const code = text.charCodeAt(i)
      if (code < 0xd800 || code > 0xdfff) continue
      const next = text.charCodeAt(i + 1)
      if (code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        i++
        continue
      }
      size += 3
    }
  }
  return size
}

/**
 * The value's JSON size, or -1 where JSON.stringify leaves it out (undefined).
 * @param {*} value
 * @param {string} key its key in its holder ('' for the root)
 * @param {Array<object>} ancestors objects on the way to it (cycle check)
 * @param {boolean} guarded the codec's guard applies (as its replacer, everywhere but a root that is not an object or number)
 */
function sizeOf (value, key, ancestors, guarded) {
  if (value !== null && (typeof value === 'object' || typeof value === 'bigint') && typeof value.toJSON === 'function') {
    value = value.toJSON(key)
  }
  const type = typeof value
  if (guarded) {
    if (type === 'number' && !Number.isFinite(value)) {
      throw new Unserialisable(`${value}${at(key)} (JSON would turn it into null; send null, a string, or use bus.serialization 'advanced')`)
    }
    if (type === 'function' || type === 'symbol') throw new Unserialisable(`a ${type}${at(key)}`)
    if (type === 'object' && value !== null) {
      if (value instanceof EventEmitter) throw new Unserialisable(`an EventEmitter such as a socket, stream or server${at(key)}`)
      if (value instanceof Map || value instanceof Set) {
        throw new Unserialisable(`a ${value instanceof Map ? 'Map' : 'Set'}${at(key)} (JSON would turn it into {}; use bus.serialization 'advanced')`)
      }
    }
  }
  if (value === null) return 4
  switch (type) {
    case 'string': return stringSize(value)
    case 'number': return Number.isFinite(value) ? String(value).length : 4
    case 'boolean': return value ? 4 : 5
    case 'bigint': throw new Unserialisable('a BigInt')
    case 'object': break
    default: return -1 // undefined, and (unguarded root) a function or symbol
  }
  // Boxed primitives are written as their primitive.
  if (value instanceof Number) return sizeOf(Number(value), key, ancestors, false)
  if (value instanceof String) return stringSize(String(value))
  if (value instanceof Boolean) return value.valueOf() ? 4 : 5
  if (ancestors.includes(value)) throw new Unserialisable('a cycle (an object that refers back to itself)')
  ancestors.push(value)
  let size = 2
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item = sizeOf(value[i], String(i), ancestors, true)
      size += (item === -1 ? 4 : item) + (i > 0 ? 1 : 0)
    }
  } else {
    const keys = Object.keys(value)
    let members = 0
    for (let i = 0; i < keys.length; i++) {
      const item = sizeOf(value[keys[i]], keys[i], ancestors, true)
      if (item === -1) continue
      size += stringSize(keys[i]) + 1 + item + (members > 0 ? 1 : 0)
      members++
    }
  }
  ancestors.pop()
  return size
}

/**
 * @param {*} value
 * @returns {number} bytes of JSON.stringify(value) in UTF-8; -1 when it gives undefined
 * @throws {Unserialisable} what the JSON codec refuses; other errors (a toJSON that throws, a value too deep) as they come
 */
function jsonSize (value) {
  const guarded = (typeof value === 'object' && value !== null) || typeof value === 'number'
  return sizeOf(value, '', [], guarded)
}

module.exports = { jsonSize, Unserialisable }
