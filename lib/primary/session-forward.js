'use strict'

/**
 * The cluster store during a primary upgrade (`clusterize upgrade`). The old
 * primary hands its sessions to the new one, then keeps serving its draining
 * workers while the new primary's workers serve new connections. From the
 * handover on there is one store, the new primary's: the old primary passes
 * every session request of its workers to the new one and answers with what
 * the new one answered. A client whose save was answered by one generation
 * of workers then reads it through the other, in either order.
 */

const debug = require('debug')('clusterize:upgrade')
const { answerWithLeases } = require('../session/leases')

/** A new primary that does not answer a passed request within this long fails it (503 to the app). */
const PASS_TIMEOUT_MS = 2000

/**
 * Old primary: pass every session request to `child` until stop().
 * @param {import('child_process').ChildProcess} child the new primary
 * @param {{ forward: Function|null }} backend the SessionBackend
 * @param {string} tag the upgrade messages' marker
 * @returns {{ stop: () => void }}
 */
function passSessionRequests (child, backend, tag) {
  let seq = 0
  /** @type {Map<number, { resolve: Function, reject: Function, timer: NodeJS.Timeout }>} */
  const waiting = new Map()
  function onMessage (message) {
    if (!message || message[tag] !== 'answer' || typeof message.n !== 'number') return
    const entry = take(message.n)
    if (entry === undefined) return
    if (message.ok === true) entry.resolve(message.value)
    else entry.reject(errorFromNewPrimary(message.error))
  }
  function take (n) {
    const entry = waiting.get(n)
    if (entry !== undefined) {
      waiting.delete(n)
      clearTimeout(entry.timer)
    }
    return entry
  }
  function failAll () {
    for (const n of [...waiting.keys()]) take(n).reject(new Error('the new primary went away before it answered this session request'))
  }
  child.on('message', onMessage)
  child.once('disconnect', failAll)
  backend.forward = function passToNewPrimary (msg) {
    if (!child.connected) return Promise.reject(new Error('the new primary is gone: session request not answered'))
    const n = ++seq
    return new Promise(function answered (resolve, reject) {
      const timer = setTimeout(function unanswered () {
        debug('session request %d: the new primary did not answer within %d ms', n, PASS_TIMEOUT_MS)
        const entry = take(n)
        if (entry !== undefined) entry.reject(new Error(`the new primary did not answer this session request within ${PASS_TIMEOUT_MS} ms`))
      }, PASS_TIMEOUT_MS)
      waiting.set(n, { resolve, reject, timer })
      child.send({ [tag]: 'op', n, msg }, function sent (err) {
        if (!err) return
        const entry = take(n)
        if (entry !== undefined) entry.reject(err)
      })
    })
  }
  return {
    stop () {
      backend.forward = null
      child.removeListener('message', onMessage)
      child.removeListener('disconnect', failAll)
      failAll()
    }
  }
}

/** A refusal of the new primary's store, rebuilt with its status (413 stays a 413). */
function errorFromNewPrimary (error) {
  const err = new Error(error && typeof error.message === 'string' ? error.message : 'the new primary refused this session request')
  if (error && typeof error.status === 'number') err.status = error.status
  return err
}

/**
 * New primary: answer a session request the old primary passed on, as any
 * worker's (a lease a new worker holds on the session is revoked first).
 * @param {{ dispatch: Function, leases: object|null }} backend
 * @param {object} msg the store request
 * @param {(answer: { ok: boolean, value?: *, error?: { message: string, status?: number } }) => void} reply
 */
function answerPassedRequest (backend, msg, reply) {
  // The old primary's workers take no lease here: they are not this primary's.
  const request = Object.assign({}, msg)
  delete request.lease
  let answer
  try {
    answer = backend.leases ? answerWithLeases(backend, backend.leases, request, 0) : backend.dispatch(request)
  } catch (err) {
    return reply(refusal(err))
  }
  Promise.resolve(answer).then(function answered (value) {
    reply({ ok: true, value })
  }, function refused (err) {
    reply(refusal(err))
  })
}

function refusal (err) {
  debug('passed session request refused: %s', err && err.message)
  return { ok: false, error: { message: String(err && err.message), status: err && typeof err.status === 'number' ? err.status : undefined } }
}

module.exports = { passSessionRequests, answerPassedRequest, PASS_TIMEOUT_MS }
