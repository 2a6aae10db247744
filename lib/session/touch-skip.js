'use strict'

/**
 * Skip the touch that changes nothing a reader can see.
 *
 * express-session (resave false) touches the store on every request that
 * read a session without modifying it: one round trip (IPC to the primary,
 * or a Redis script) only to move the expiry by however long it has been
 * since the last touch, often a few milliseconds on a busy session. Here a
 * touch is skipped when, against the session as it was loaded, the cookie is
 * the same but for its expiry and that moved forward by less than
 * TOUCH_RESOLUTION_MS and less than TOUCH_FRACTION of the cookie's maxAge.
 * The stored expiry then trails the cookie's by less than that: under the
 * one second of the Set-Cookie Expires attribute itself, and a negligible
 * part of the session's lifetime. Everything else is touched as before: a
 * cookie without an expiry (the store's ttl applies, from a last touch this
 * process cannot see), a cookie whose other fields changed, an expiry moved
 * back, a session not loaded from the store (new, regenerated).
 */

const debug = require('debug')('clusterize:session')
const { answer } = require('./callback')

const TOUCH_RESOLUTION_MS = 1000
const TOUCH_FRACTION = 0.01
/** The cookie as loaded from the store: a symbol, so it is never serialized or hashed. */
const LOADED = Symbol('clusterize.session.loadedCookie')
/** The same, still as the store's plain data (described only when a touch asks). */
const LOADED_DATA = Symbol('clusterize.session.loadedCookieData')

/**
 * The cookie's fields other than its expiry, and its expiry in ms (NaN without one).
 * @param {object} cookie an express-session Cookie, or the plain data a store returned for one
 *   (what Cookie#toJSON gave when the session was saved: its expiry an ISO string)
 * @returns {{ rest: string, expires: number }}
 */
function cookieState (cookie) {
  const json = typeof cookie.toJSON === 'function' ? cookie.toJSON() : cookie
  const rest = Object.assign({}, json)
  delete rest.expires
  const expires = cookie.expires instanceof Date
    ? cookie.expires.getTime()
    : typeof cookie.expires === 'string' ? Date.parse(cookie.expires) : NaN
  return { rest: JSON.stringify(rest), expires }
}

/**
 * The cookie as it was loaded, as cookieState() describes it. Our stores
 * return plain data that nothing changes afterwards (express-session builds
 * a new Cookie from it), so it is kept as it came and described only when a
 * touch asks: a request that modifies its session, and is saved instead,
 * never pays for it.
 * @param {object} sess
 * @returns {{ rest: string, expires: number }|null}
 */
function loadedState (sess) {
  if (sess[LOADED]) return sess[LOADED]
  return sess[LOADED_DATA] ? cookieState(sess[LOADED_DATA]) : null
}

/**
 * Would touching this session change nothing beyond the resolution above?
 * @param {object} sess the session express-session is about to touch
 * @returns {boolean}
 */
function touchIsNeedless (sess) {
  const loaded = sess ? loadedState(sess) : null
  if (!loaded || !Number.isFinite(loaded.expires) || !sess.cookie) return false
  const now = cookieState(sess.cookie)
  if (!Number.isFinite(now.expires) || now.rest !== loaded.rest) return false
  const maxAge = sess.cookie.originalMaxAge
  const limit = Math.min(TOUCH_RESOLUTION_MS, typeof maxAge === 'number' && maxAge > 0 ? maxAge * TOUCH_FRACTION : 0)
  const moved = now.expires - loaded.expires
  return moved >= 0 && moved < limit
}

/**
 * Make express-session skip needless touches on one of our stores: its
 * createSession notes the cookie as loaded, its touch answers at once when
 * touchIsNeedless(). Calls that do not come through express-session's load
 * (no noted cookie) go to the store unchanged.
 * @param {object} store an express-session Store of ours
 * @returns {object} the same store
 */
function skipNeedlessTouches (store) {
  const createSession = store.createSession
  const touch = store.touch
  if (typeof createSession !== 'function' || typeof touch !== 'function') return store

  store.createSession = function createSessionNotingCookie (req, sess) {
    const stored = sess && sess.cookie
    const session = createSession.call(this, req, sess)
    if (session && session.cookie) {
      // Plain data from the store is kept as it is (loadedState() describes it if a touch
      // comes); a live object could still change, so it is described now.
      const plain = stored && typeof stored === 'object' && typeof stored.toJSON !== 'function'
      if (plain) Object.defineProperty(session, LOADED_DATA, { value: stored, configurable: true, writable: true })
      else Object.defineProperty(session, LOADED, { value: cookieState(session.cookie), configurable: true, writable: true })
    }
    return session
  }

  store.touch = function touchUnlessNeedless (sid, sess, cb) {
    if (!touchIsNeedless(sess)) return touch.apply(this, arguments)
    debug('touch %s: expiry moved less than its resolution, skipped', sid)
    if (typeof cb !== 'function') return Promise.resolve()
    // Answered as our stores answer (after this call returns, noted as a success for
    // hold-response.js), since express-session ends the response from this callback.
    process.nextTick(answer, cb, null)
  }
  return store
}

module.exports = { skipNeedlessTouches, touchIsNeedless, cookieState, TOUCH_RESOLUTION_MS, TOUCH_FRACTION }
