'use strict'

/**
 * The cluster session store's primary-side service (lib/services/list.js):
 * the primary (or the single process) holds one SessionBackend and answers
 * the stores' requests, one method per operation (SESSION_OP). Requests
 * arrive as plain data: the session is a JSON string the worker's store
 * encoded once, and the IPC channel frames the message.
 */

const debug = require('debug')('clusterize:session')
const { SessionBackend } = require('./cluster-backend')
const { SESSION_OP } = require('./cluster-ops')
const { SessionLeases, answerWithLeases } = require('./leases')

/** The service's name: what the stores' client asks for. */
const SERVICE = 'session'

/**
 * Every operation answers through the backend's dispatch (it reads `msg.op`),
 * with the read leases when there are any.
 * @param {SessionBackend} backend
 * @param {SessionLeases|null} leases
 * @returns {Object<string, Function>}
 */
function sessionRequests (backend, leases) {
  const requests = {}
  for (const op of Object.values(SESSION_OP)) {
    requests[op] = leases === null
      ? function answerSessionRequest (msg) { return backend.dispatch(msg) }
      : function answerLeasedSessionRequest (msg, caller) { return caller.passed ? answerPassed(backend, leases, msg) : answerWithLeases(backend, leases, msg, caller.pid) }
  }
  return requests
}

/**
 * A request of the other primary's worker during an upgrade (lib/primary/handover.js):
 * answered as any worker's (a lease one of this primary's workers holds on the
 * session is revoked first), but it takes no lease: nothing can revoke it from here.
 */
function answerPassed (backend, leases, msg) {
  const request = Object.assign({}, msg)
  delete request.lease
  return answerWithLeases(backend, leases, request, 0)
}

/**
 * How the sessions cross `clusterize upgrade`: every lease is revoked first
 * (the saves its holder answered are then in the store), then the snapshot.
 * @param {SessionBackend} backend
 * @param {SessionLeases|null} leases
 */
function sessionHandover (backend, leases) {
  return {
    /**
     * A rollback to 0.2.0 (lib/primary/handover.js): the snapshot goes by its `sessions`
     * message, and each of these operations the draining workers make after it by `write`.
     */
    legacy: { message: 'sessions', writes: [SESSION_OP.SET, SESSION_OP.TOUCH, SESSION_OP.DESTROY, SESSION_OP.CLEAR] },
    prepare: () => leases === null ? undefined : leases.suspend(),
    resume: () => { if (leases !== null) leases.resume() },
    export: () => backend.snapshot(),
    import: (entries) => { backend.restore(entries) }
  }
}

const sessionService = {
  name: SERVICE,
  handover: { crosses: 'handedOver', what: 'every session (the cluster store), once every read lease is revoked; the old workers\' session requests are answered by the new primary\'s store from the handover on' },
  /**
   * @param {{ config?: { clusterStore?: { maxSessions: number, maxTotalBytes: number } } }} context
   * @returns {object} handlers; `api` is the backend (stats)
   */
  start: function startSessionService (context) {
    // The bounds are clusterize() options (clusterStore), validated at startup; a store's own
    // maxSessions/maxTotalBytes still reach the backend at runtime (deprecated, see cluster-store.js).
    const options = (context && context.config && context.config.clusterStore) || undefined
    const backend = new SessionBackend(options)
    const leaseMs = options && options.leaseMs > 0 ? options.leaseMs : 0
    // Leases save workers a round trip; in-process calls (workers: 0) have none to save.
    const leases = leaseMs > 0 && context && typeof context.push === 'function' ? new SessionLeases({ leaseMs, push: context.push }) : null
    backend.leases = leases
    backend.log = (context && context.log) || null
    debug('cluster session backend started (maxSessions %d, leases %d ms)', backend.maxSessions, leaseMs)
    return {
      requests: sessionRequests(backend, leases),
      notifications: {
        /** A worker dropped the copies it held under these leases (grants). */
        revoked: function leasesRevoked (grants, caller) {
          if (leases !== null) leases.acknowledged(caller.pid, grants)
        }
      },
      workerExit: function forgetLeases (caller) {
        if (leases !== null) leases.forget(caller.pid)
      },
      api: backend,
      handover: sessionHandover(backend, leases),
      close: () => {
        if (leases !== null) leases.close()
        return backend.close()
      }
    }
  }
}

module.exports = { sessionService, SERVICE }
