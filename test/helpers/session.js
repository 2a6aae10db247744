'use strict'

/**
 * Session records for the store tests, shaped as express-session stores them.
 */

/**
 * A session as express-session stores it (cookie.toJSON output), expiring in `ms` (null: a browser-session cookie).
 * @param {number|null} ms
 * @param {object} [extra] the session's data
 */
function sessionExpiringIn (ms, extra) {
  return Object.assign({
    cookie: {
      originalMaxAge: ms,
      expires: ms === null ? null : new Date(Date.now() + ms).toISOString(),
      secure: false,
      httpOnly: true,
      path: '/',
      sameSite: 'lax'
    }
  }, extra)
}

module.exports = { sessionExpiringIn }
