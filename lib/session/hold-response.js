'use strict'

/**
 * Hold a response until its session is stored.
 *
 * express-session sends the status line and headers as soon as the app calls
 * res.end(), then saves (or touches, or destroys) the session, and reports a
 * store error only afterwards, when the 200 is already on the wire: a write
 * the store never took was acknowledged (a session over the bus size limit, a
 * frozen Redis). Here the response's head and body are held from the app's
 * res.end() until the store has answered: success releases them unchanged;
 * a store error replaces them with 503 (or 413 for a session over its size
 * limit) and a log line.
 *
 * Layering (outermost first): app -> endAfterStore (ours, marks the end) ->
 * express-session's end -> on-headers' writeHead -> held* (ours) -> Node.
 * The held* functions pass everything straight through until the app ends.
 * express-session reports a store error by deferring next(err) with
 * setImmediate before it calls the end below it; the release is deferred the
 * same way after that end, so the error has always arrived when it runs.
 * With our own stores the release is not deferred when the end comes from
 * inside a store callback that succeeded (or from no store operation at all,
 * inside the callback of an earlier one): no error can follow, and the
 * response leaves one event-loop turn sooner.
 *
 * A response whose headers were sent before res.end() (a streamed response)
 * cannot become a 503: on a store error it is cut off (the socket is
 * destroyed), so the client sees a failed response rather than a complete one.
 */

const debug = require('debug')('clusterize:session')
const { failureBody, writeFailure } = require('./unavailable')

/**
 * @param {import('http').IncomingMessage} req
 * @param {import('http').ServerResponse} res
 * @param {(err: Error, headersWereSent: boolean, end: Function) => void} onFailure sends
 *   the error response with `end` (the response's own end, below every proxy) or,
 *   when the headers were already sent, cuts the response off
 * @param {import('./callback').CallbackOutcome|null} [storeOutcome] the store's, when it is one of
 *   ours (lib/session/callback.js notes its callbacks' outcomes there)
 * @returns {{ afterSession: () => void, fail: (err: Error) => boolean }}
 *   afterSession(): call once express-session has passed the request on (its
 *   res.end proxy is in place); fail(err): a store error arrived, returns false
 *   when the response is not being held (the caller handles the error itself)
 */
function holdResponse (req, res, onFailure, storeOutcome) {
  const realWriteHead = res.writeHead
  const realWrite = res.write
  const realEnd = res.end
  let holding = false
  let released = false
  let failure = null
  let head = null
  let headersWereSent = false
  const calls = []

  res.writeHead = function heldWriteHead () {
    if (!holding) return realWriteHead.apply(this, arguments)
    head = arguments
    return this
  }
  res.write = function heldWrite () {
    if (!holding) return realWrite.apply(this, arguments)
    calls.push([realWrite, arguments])
    return true
  }
  res.end = function heldEnd () {
    if (!holding) return realEnd.apply(this, arguments)
    calls.push([realEnd, arguments])
    if (storeOutcome && storeOutcome.answeredSuccessfully()) release()
    else setImmediate(release)
    return this
  }

  function release () {
    if (released) return
    released = true
    holding = false
    if (failure !== null) {
      onFailure(failure, headersWereSent, realEnd)
      return
    }
    if (head !== null) realWriteHead.apply(res, head)
    for (const [fn, args] of calls) fn.apply(res, args)
  }

  return {
    afterSession: function afterSession () {
      const sessionEnd = res.end
      res.end = function endAfterStore () {
        if (!holding && !released) {
          headersWereSent = res.headersSent
          holding = true
        }
        return sessionEnd.apply(this, arguments)
      }
    },
    fail: function fail (err) {
      if (!holding && !released) return false
      if (released) {
        debug('store error after the response was released: %s', err && err.message)
        return true
      }
      if (failure === null) failure = err
      return true
    }
  }
}

/**
 * Replace a held response with a JSON error: 413 for a session over its size
 * limit, else 503 with Retry-After. Headers the app (and express-session's
 * Set-Cookie) put on the held response are dropped: they described a
 * response that is not sent.
 * @param {import('http').ServerResponse} res
 * @param {Error & { status?: number }} err
 * @param {number} retryAfterSeconds
 * @param {Function} end the response's own end (below every proxy)
 * @param {boolean} [production] hide the reason of a 503 (failureBody)
 */
function sendStoreFailure (res, err, retryAfterSeconds, end, production) {
  for (const name of res.getHeaderNames()) res.removeHeader(name)
  writeFailure(res, err.status === 413 ? 413 : 503, failureBody(err, production), retryAfterSeconds, end)
}

module.exports = { holdResponse, sendStoreFailure }
