'use strict'

/**
 * session(options): express-session with shared stores and safe defaults.
 *
 * store: 'auto' (Redis when `redis` or REDIS_URL is set, else the cluster
 * store held by the primary) | 'redis' | 'cluster' | 'memory' (single process
 * only) | an express-session Store. When the store cannot answer, the request
 * gets 503 `{ error: 'session store unavailable: ...' }` with Retry-After:
 * never a fresh empty session, never a silent `req.session === undefined`.
 */

const expressSession = require('express-session')
const debug = require('debug')('clusterize:session')
const { resolveSessionOptions } = require('../lib/session/options')
const { createStore } = require('../lib/session/create-store')
const { isUnavailable, toUnavailable, sendUnavailable, PUBLIC_MESSAGE, SessionStoreUnavailableError } = require('../lib/session/unavailable')
const { registerStatus, sessionStatus } = require('../lib/session/status')
const { holdResponse, sendStoreFailure } = require('../lib/session/hold-response')
const { sessionLog } = require('../lib/session/log')
const { skipNeedlessTouches } = require('../lib/session/touch-skip')

/**
 * @param {object} [options] express-session options plus store, redis, prefix, ttl, timeoutMs, maxSessions,
 *   maxTotalBytes, maxSessionBytes, retryAfter
 * @returns {import('express').RequestHandler & { store: object, storeKind: string, close: () => Promise<void> }}
 */
function session (options) {
  const opts = resolveSessionOptions(options, process.env)
  const made = createStore(opts, process.env)
  const ownStore = made.kind === 'cluster' || made.kind === 'redis'
  // Only on our own stores: a store the app passed in is the app's object, left as it is.
  if (ownStore) skipNeedlessTouches(made.store)
  const inner = expressSession(Object.assign({}, opts.expressSession, { store: made.store }))
  const unregister = registerStatus(made.kind, made.availability)
  const gate = made.gate
  const retryAfter = opts.retryAfter
  const production = opts.production
  let lastLoggedReason = null

  function clusterizeSession (req, res, next) {
    if (req.session) return next()
    if (gate === null) return runSession(req, res, next)
    gate(function gateAnswered (err) {
      if (err) {
        debug('%s %s: %s', req.method, req.url, err.message)
        if (production) logUnavailableOnce(err)
        sendUnavailable(res, err, retryAfter, production)
        return
      }
      lastLoggedReason = null
      runSession(req, res, next)
    })
  }

  function runSession (req, res, next) {
    let passedOn = false
    const held = holdResponse(req, res, function storeFailed (err, headersWereSent, end) {
      reportNotStored(req, res, err, headersWereSent, end)
    }, ownStore ? made.store.outcome : null)
    inner(req, res, function afterSession (err) {
      // After the app ended the response, an error is express-session's save/touch/destroy failing.
      if (err && passedOn && held.fail(err.status === 413 ? err : toUnavailable(err, made.kind))) return
      // Before express-session passes on, an error can only come from store.get.
      if (err && (isUnavailable(err) || !passedOn)) {
        const unavailable = toUnavailable(err, made.kind)
        if (production) logUnavailableOnce(unavailable)
        if (!sendUnavailable(res, unavailable, retryAfter, production)) {
          debug('session not saved, response already sent: %s', unavailable.message)
        }
        return
      }
      if (!passedOn) held.afterSession()
      passedOn = true
      next(err)
    })
  }

  /** The session write behind this response failed: the client is told, and so is the log. */
  function reportNotStored (req, res, err, headersWereSent, end) {
    const path = (req.originalUrl || req.url || '').split('?')[0]
    if (headersWereSent) {
      sessionLog().error(`session not stored for ${req.method} ${path}: ${err.message}; the response had already started, so it was cut off`, { store: made.kind })
      res.destroy()
      return
    }
    const status = err.status === 413 ? 413 : 503
    // No session on a response that stored none: express-session sets its cookie when the head is written.
    req.session = null
    sessionLog().warn(`session not stored for ${req.method} ${path}: ${err.message}; the request got ${status}`, { store: made.kind })
    sendStoreFailure(res, err, retryAfter, end, production)
  }

  /**
   * In production the 503 body names no host: the reason goes to the log instead, once per
   * distinct reason in a row, so an outage is one line, not one per request.
   */
  function logUnavailableOnce (err) {
    if (err.message === lastLoggedReason) return
    lastLoggedReason = err.message
    sessionLog().warn(`${err.message}; clients get 503 "${PUBLIC_MESSAGE}"`, { store: made.kind })
  }

  clusterizeSession.store = made.store
  clusterizeSession.storeKind = made.kind
  clusterizeSession.close = function close () {
    unregister()
    return made.close()
  }
  return clusterizeSession
}

session.status = sessionStatus

module.exports = session
module.exports.session = session
module.exports.sessionStatus = sessionStatus
module.exports.SessionStoreUnavailableError = SessionStoreUnavailableError
module.exports.SessionTooLargeError = require('../lib/session/too-large').SessionTooLargeError
