'use strict'

/**
 * The cluster store's requests to the primary's backend, as they travel:
 * `{ op, sid?, sess?, expires?, cookie?, prefix?, maxSessions?, maxTotalBytes? }`,
 * and how each one maps onto a SessionBackend (./cluster-backend.js). The
 * backend is a data structure keyed by one string; the prefixes (a store's
 * namespace) are folded into that key here.
 */

const SESSION_OP = Object.freeze({
  GET: 'get',
  SET: 'set',
  TOUCH: 'touch',
  DESTROY: 'destroy',
  ALL: 'all',
  LENGTH: 'length',
  CLEAR: 'clear',
  CONFIGURE: 'configure'
})

/**
 * The map key of a session: the bare id in the default namespace (so keys
 * are what they always were), else prefix, NUL, id. A session id is a cookie
 * value and never holds a NUL, so keys of different prefixes cannot meet.
 */
function keyOf (prefix, sid) {
  return prefix === '' ? sid : prefix + '\u0000' + sid
}

/** The session id in a key made by keyOf(prefix, sid). */
function sidOf (prefix, key) {
  return prefix === '' ? key : key.slice(prefix.length + 1)
}

/**
 * Answer one store request with the backend.
 * @param {import('./cluster-backend').SessionBackend} backend
 * @param {{ op: string, prefix?: string, sid?: string, sess?: string, expires?: number, cookie?: string, maxSessions?: number, maxTotalBytes?: number }} msg
 * @returns {*} a JSON-serialisable answer
 */
function dispatchSessionOp (backend, msg) {
  // Messages with no prefix (older workers) are in the default namespace ''.
  const prefix = msg && typeof msg.prefix === 'string' ? msg.prefix : ''
  switch (msg && msg.op) {
    case SESSION_OP.GET: return backend.get(keyOf(prefix, msg.sid))
    case SESSION_OP.SET: backend.set(keyOf(prefix, msg.sid), msg.sess, msg.expires, prefix); return true
    case SESSION_OP.TOUCH: return backend.touch(keyOf(prefix, msg.sid), msg.expires, msg.cookie)
    case SESSION_OP.DESTROY: backend.destroy(keyOf(prefix, msg.sid)); return true
    case SESSION_OP.ALL: return backend.all(prefix)
    case SESSION_OP.LENGTH: return backend.length(prefix)
    case SESSION_OP.CLEAR: backend.clear(prefix); return true
    case SESSION_OP.CONFIGURE: backend.configure(msg); return true
    default: throw new Error(`cluster session store: unknown operation ${JSON.stringify(msg && msg.op)}`)
  }
}

module.exports = { SESSION_OP, keyOf, sidOf, dispatchSessionOp }
