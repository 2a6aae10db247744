'use strict'

/**
 * What happens when the session store cannot answer: a typed error carrying
 * HTTP status 503, and the JSON 503 response the session middleware sends
 * instead of handing the request a fresh, empty session.
 */

const { SessionHttpError } = require('./http-error')

const CODE = 'ERR_CLUSTERIZE_SESSION_STORE_UNAVAILABLE'

class SessionStoreUnavailableError extends SessionHttpError {
  /**
   * @param {string} message already prefixed with "session store unavailable: "
   * @param {{ cause?: Error, store?: string }} [options]
   */
  constructor (message, options) {
    super(message, { name: 'SessionStoreUnavailableError', code: CODE, status: 503, cause: options && options.cause })
    this.store = options && options.store
  }
}

/**
 * Turn any store failure into a SessionStoreUnavailableError (once).
 * @param {*} err
 * @param {string} store the store's name: 'redis', 'cluster', or the class name
 * @returns {SessionStoreUnavailableError}
 */
function toUnavailable (err, store) {
  if (err instanceof SessionStoreUnavailableError) return err
  const reason = err && err.message ? err.message : String(err)
  return new SessionStoreUnavailableError(`session store unavailable: ${store} store: ${reason}`, { cause: err, store })
}

/**
 * @param {*} err
 * @returns {boolean}
 */
function isUnavailable (err) {
  return err instanceof SessionStoreUnavailableError || (err !== null && typeof err === 'object' && err.code === CODE)
}

/** What an anonymous client is told in production: nothing about where the store lives. */
const PUBLIC_MESSAGE = 'session store unavailable'

/**
 * The JSON body of a store failure. In production a 503 says only that the
 * store is unavailable (the reason names hosts and ports: it stays in the
 * log); elsewhere it carries the reason, for the developer at the browser.
 * @param {Error & { status?: number }} err
 * @param {boolean} [production]
 * @returns {string}
 */
function failureBody (err, production) {
  const hideDetail = production && err.status !== 413
  return JSON.stringify({ error: hideDetail ? PUBLIC_MESSAGE : err.message })
}

/**
 * Answer 503 `{ error }` with Retry-After. Never throws; does nothing once
 * headers are out (the response is already committed).
 * @param {import('http').ServerResponse} res
 * @param {Error} err
 * @param {number} [retryAfterSeconds=1]
 * @param {boolean} [production] say only "session store unavailable" (failureBody)
 * @returns {boolean} whether a 503 was sent
 */
function sendUnavailable (res, err, retryAfterSeconds, production) {
  if (res.headersSent) return false
  writeFailure(res, 503, failureBody(err, production), retryAfterSeconds, res.end)
  return true
}

/**
 * Write a store failure's JSON response: `status`, and Retry-After on a 503.
 * @param {import('http').ServerResponse} res
 * @param {number} status
 * @param {string} body
 * @param {number} [retryAfterSeconds=1]
 * @param {Function} end the response's end to call (a held response passes its own, below every proxy)
 */
function writeFailure (res, status, body, retryAfterSeconds, end) {
  res.statusCode = status
  if (status === 503) res.setHeader('Retry-After', String(retryAfterSeconds || 1))
  res.setHeader('Cache-Control', 'no-store')
  res.setHeader('Content-Type', 'application/json; charset=utf-8')
  res.setHeader('Content-Length', Buffer.byteLength(body))
  end.call(res, body)
}

module.exports = { SessionStoreUnavailableError, toUnavailable, isUnavailable, sendUnavailable, failureBody, writeFailure, PUBLIC_MESSAGE, CODE }
