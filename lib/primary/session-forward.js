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
const { createPendingCalls } = require('../services/pending-calls')
const { errorToWire, errorFromWire } = require('../bus/errors')

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
  const pending = createPendingCalls()
  function onMessage (message) {
    if (!message || message[tag] !== 'answer' || typeof message.n !== 'number') return
    const call = pending.take(message.n)
    if (call === undefined) return
    if (message.ok === true) call.resolve(message.value)
    else call.reject(errorFromWire(message.error, 'the new primary refused this session request'))
  }
  function failAll () {
    pending.failAll((call) => call.reject(new Error('the new primary went away before it answered this session request')))
  }
  child.on('message', onMessage)
  child.once('disconnect', failAll)
  backend.forward = function passToNewPrimary (msg) {
    if (!child.connected) return Promise.reject(new Error('the new primary is gone: session request not answered'))
    return pending.add({}, PASS_TIMEOUT_MS, function unanswered (call) {
      debug('a session request: the new primary did not answer within %d ms', PASS_TIMEOUT_MS)
      call.reject(new Error(`the new primary did not answer this session request within ${PASS_TIMEOUT_MS} ms`))
    }, function send (n) {
      child.send({ [tag]: 'op', n, msg }, function sent (err) {
        const call = err ? pending.take(n) : undefined
        if (call !== undefined) call.reject(err)
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
  return { ok: false, error: errorToWire(err) }
}

module.exports = { passSessionRequests, answerPassedRequest, PASS_TIMEOUT_MS }
