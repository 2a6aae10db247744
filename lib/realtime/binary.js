'use strict'

/**
 * socket.io payloads may hold binary data (Buffer, ArrayBuffer, typed
 * arrays), which socket.io sends as attachments. The bus's default 'json'
 * mode would turn a Buffer into `{ type: 'Buffer', data: [...] }` on the way
 * to another worker, and other modes keep it in other shapes. So the adapter
 * carries binaries itself, the same way in every bus mode: each one is taken
 * out of the message (left as null), sent beside it as base64 with its path,
 * and put back as a Buffer on the other side. A message without binaries is
 * not copied, and its receiver does nothing extra.
 */

const debug = require('debug')('clusterize:socket.io')

// Deeper than any real payload; a cyclic one stops here and fails in the bus codec, as before.
const MAX_DEPTH = 64

/** What socket.io-parser sends as an attachment. */
function isBinary (value) {
  return Buffer.isBuffer(value) || value instanceof ArrayBuffer || ArrayBuffer.isView(value)
}

function toBuffer (value) {
  if (Buffer.isBuffer(value)) return value
  if (value instanceof ArrayBuffer) return Buffer.from(value)
  return Buffer.from(value.buffer, value.byteOffset, value.byteLength)
}

/** Set an own property, also one named `__proto__` (no prototype setter). */
function setOwn (target, key, value) {
  Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true })
}

/**
 * `value` with every binary replaced by null, copying only the objects and
 * arrays on the way to one; the binaries go to `found` as [path, base64].
 */
function strip (value, path, found, depth) {
  if (isBinary(value)) {
    found.push([path.slice(), toBuffer(value).toString('base64')])
    return null
  }
  // Like JSON (and socket.io-parser), an object with toJSON is sent as what that returns: not walked.
  if (depth >= MAX_DEPTH || value instanceof Date || typeof value.toJSON === 'function') return value
  const array = Array.isArray(value)
  const keys = array ? null : Object.keys(value)
  const length = array ? value.length : keys.length
  let copy = null
  for (let i = 0; i < length; i++) {
    const key = array ? i : keys[i]
    const child = value[key]
    if (child === null || typeof child !== 'object') continue
    path.push(key)
    const next = strip(child, path, found, depth + 1)
    path.pop()
    if (next === child) continue
    if (copy === null) copy = array ? value.slice() : { ...value }
    setOwn(copy, key, next)
  }
  return copy === null ? value : copy
}

/**
 * Take the binaries out of a message for the bus.
 * @param {object} message
 * @returns {{ message: object, binaries: Array<[Array<string|number>, string]>|null }}
 *   `binaries` is null when there were none (and `message` is the one given)
 */
function extractBinaries (message) {
  if (message === null || typeof message !== 'object') return { message, binaries: null }
  const found = []
  const stripped = strip(message, [], found, 0)
  return found.length === 0 ? { message, binaries: null } : { message: stripped, binaries: found }
}

/** The place of `path` in `message` exists (every container on the way is an own object property). */
function placeExists (message, path) {
  let container = message
  for (let i = 0; i < path.length - 1; i++) {
    if (container === null || typeof container !== 'object' || !Object.prototype.hasOwnProperty.call(container, path[i])) return false
    container = container[path[i]]
  }
  return container !== null && typeof container === 'object'
}

/**
 * Put the binaries of extractBinaries() back, as Buffers. The objects and
 * arrays on the way to each are copied (each once), never changed: the
 * message may be shared, e.g. an entry of the primary's recovery log when
 * everything runs in one process.
 * @param {object} message
 * @param {Array<[Array<string|number>, string]>} binaries
 * @returns {object} the message with its binaries (the one given when there were none to put back)
 */
function restoreBinaries (message, binaries) {
  if (!Array.isArray(binaries)) return message
  const root = { value: message }
  const copies = new Set()
  for (const entry of binaries) {
    const path = Array.isArray(entry) ? entry[0] : null
    if (!Array.isArray(path) || path.length === 0 || typeof entry[1] !== 'string') {
      debug('a malformed binary attachment was dropped')
      continue
    }
    if (!placeExists(root.value, path)) {
      debug('a binary attachment whose place is missing was dropped')
      continue
    }
    let parent = root
    let key = 'value'
    for (let i = 0; i < path.length; i++) {
      let container = parent[key]
      if (!copies.has(container)) {
        container = Array.isArray(container) ? container.slice() : { ...container }
        copies.add(container)
        setOwn(parent, key, container)
      }
      parent = container
      key = path[i]
    }
    setOwn(parent, key, Buffer.from(entry[1], 'base64'))
  }
  return root.value
}

/**
 * `envelope` carrying `payload` under `key`, its binaries (Buffers, typed
 * arrays) beside it in `b`, so they arrive as Buffers whatever the bus's
 * serialization.
 * @param {object} envelope
 * @param {string} key
 * @param {*} payload
 * @returns {object} envelope
 */
function withBinaries (envelope, key, payload) {
  const { message, binaries } = extractBinaries(payload)
  envelope[key] = message
  if (binaries !== null) envelope.b = binaries
  return envelope
}

/**
 * The binaries of a message that lie under `prefix`, with paths relative to
 * it: a recovery log keeps only a broadcast's packet arguments
 * (m.data.packet.data), and replays them with their binaries.
 * @param {Array<[Array<string|number>, string]>|undefined} binaries
 * @param {Array<string|number>} prefix
 * @returns {Array<[Array<string|number>, string]>|undefined} undefined when none
 */
function binariesUnder (binaries, prefix) {
  if (!Array.isArray(binaries)) return undefined
  const under = []
  for (const entry of binaries) {
    const path = Array.isArray(entry) ? entry[0] : null
    if (!Array.isArray(path) || path.length <= prefix.length || typeof entry[1] !== 'string') continue
    if (prefix.every((part, i) => path[i] === part)) under.push([path.slice(prefix.length), entry[1]])
  }
  return under.length === 0 ? undefined : under
}

module.exports = { extractBinaries, restoreBinaries, withBinaries, binariesUnder, isBinary }
