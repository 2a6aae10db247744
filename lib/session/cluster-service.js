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
      : function answerLeasedSessionRequest (msg, caller) { return answerWithLeases(backend, leases, msg, caller.pid) }
  }
  return requests
}

const sessionService = {
  name: SERVICE,
  handover: { crosses: 'handedOver', own: 'lib/primary/session-forward.js', what: 'every session (the cluster store); the old workers\' session requests are answered by the new primary\'s store from the handover on' },
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
      close: () => {
        if (leases !== null) leases.close()
        return backend.close()
      }
    }
  }
}

module.exports = { sessionService, SERVICE }
