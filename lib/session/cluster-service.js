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

/** The service's name: what the stores' client asks for. */
const SERVICE = 'session'

/**
 * Every operation answers through the backend's dispatch (it reads `msg.op`).
 * @param {SessionBackend} backend
 * @returns {Object<string, Function>}
 */
function sessionRequests (backend) {
  const requests = {}
  for (const op of Object.values(SESSION_OP)) {
    requests[op] = function answerSessionRequest (msg) {
      return backend.dispatch(msg)
    }
  }
  return requests
}

const sessionService = {
  name: SERVICE,
  /**
   * @param {{ config?: { clusterStore?: { maxSessions: number, maxTotalBytes: number } } }} context
   * @returns {object} handlers; `api` is the backend (stats)
   */
  start: function startSessionService (context) {
    // The bounds are clusterize() options (clusterStore), validated at startup; a store's own
    // maxSessions/maxTotalBytes still reach the backend at runtime (deprecated, see cluster-store.js).
    const backend = new SessionBackend((context && context.config && context.config.clusterStore) || undefined)
    debug('cluster session backend started (maxSessions %d)', backend.maxSessions)
    return {
      requests: sessionRequests(backend),
      api: backend,
      close: () => backend.close()
    }
  }
}

module.exports = { sessionService, SERVICE }
