'use strict'

/**
 * Can express-session turn a stored record back into req.session? A record
 * that is not JSON cannot be; for one that is, express-session calls
 * `new Cookie(sess.cookie)` and later serialises that cookie; a record that
 * fails either (no cookie, a cookie that is not an object, an invalid
 * expires / maxAge / sameSite ...) would make every request with that cookie
 * fail. Our stores treat such a record as no session: the visitor gets a
 * fresh one, as with a tampered cookie, and one log line says why.
 */

const { Cookie } = require('express-session')
const debug = require('debug')('clusterize:session')
const { sessionLog } = require('./log')

/** What a store's parser returns for a stored record that is not JSON. */
class Unreadable {
  /** @param {string} reason the parser's message */
  constructor (reason) {
    this.reason = reason
  }
}

/**
 * @param {*} sess a parsed stored record
 * @returns {string|null} why express-session cannot inflate it, or null when it can
 */
function whyNotInflatable (sess) {
  if (sess instanceof Unreadable) return `it is not JSON: ${sess.reason}`
  if (sess === null || typeof sess !== 'object' || Array.isArray(sess)) return `the record is ${describe(sess)}, not an object`
  const stored = sess.cookie
  if (stored === null || typeof stored !== 'object' || Array.isArray(stored)) return `its cookie is ${describe(stored)}, not an object`
  const expires = stored.expires
  if (expires !== undefined && expires !== null && typeof expires !== 'string') return `its cookie.expires is ${describe(expires)}`
  try {
    // What express-session's Store#createSession does, then what it does to send the cookie.
    const cookie = new Cookie(Object.assign({}, stored))
    if (typeof expires === 'string') cookie.expires = new Date(expires)
    cookie.serialize('sid', 'value')
  } catch (err) {
    return `its cookie is invalid: ${err.message}`
  }
  return null
}

function describe (value) {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return typeof value === 'string' ? 'a string' : typeof value
}

/**
 * The record if express-session can inflate it, else null: the record is then
 * removed (it can never be read; keeping it would log again on every request
 * that presents its cookie) and one line is logged.
 * @param {*} sess
 * @param {string} store 'cluster' | 'redis'
 * @param {(cb: (err: Error|null) => void) => void} remove deletes the record
 * @returns {object|null}
 */
function inflatableOrNull (sess, store, remove) {
  if (sess === null || sess === undefined) return null
  const reason = whyNotInflatable(sess)
  if (reason === null) return sess
  sessionLog().warn(`session store ${store}: a stored session could not be read (${reason}); removed it, that visitor gets a new session`, { store })
  remove(function removed (err) {
    if (err) debug('%s store: unreadable session not removed: %s', store, err.message)
  })
  return null
}

module.exports = { whyNotInflatable, inflatableOrNull, Unreadable }
