'use strict'

/**
 * Where the cluster session backend meets the bus: the primary (or the single
 * process) attaches one backend per bus, answering the cluster store's
 * requests on the reserved topic.
 */

const debug = require('debug')('clusterize:session')
const { SessionBackend, SESSION_OP } = require('./cluster-backend')

const TOPIC = '$cz:session'
const attached = new WeakMap()

/**
 * Create the cluster session backend and answer `$cz:session` requests on
 * `bus`. Call it once in the primary at startup (and in the single process
 * when `workers: 0`). Idempotent per bus: a second call returns the same
 * backend (and applies a new `maxSessions` / `maxTotalBytes`, if given).
 *
 * @param {{ handle: (topic: string, fn: Function) => any }} bus
 * @param {object} [options] see SessionBackend
 * @returns {SessionBackend}
 */
function attachSessionBackend (bus, options) {
  if (!bus || typeof bus.handle !== 'function') {
    throw new TypeError('attachSessionBackend(bus): bus must have a handle(topic, fn) method')
  }
  const existing = attached.get(bus)
  if (existing) {
    if (options && (options.maxSessions !== undefined || options.maxTotalBytes !== undefined)) {
      existing.dispatch({ op: SESSION_OP.CONFIGURE, maxSessions: options.maxSessions, maxTotalBytes: options.maxTotalBytes })
    }
    return existing
  }
  const backend = new SessionBackend(options)
  bus.handle(TOPIC, function answerSessionRequest (data) {
    return backend.dispatch(data)
  })
  attached.set(bus, backend)
  debug('cluster session backend attached (maxSessions %d)', backend.maxSessions)
  return backend
}

/**
 * The backend attached to `bus`, if any.
 * @param {object} bus
 * @returns {SessionBackend|undefined}
 */
function backendFor (bus) {
  return attached.get(bus)
}

/**
 * The service of lib/services/list.js: the primary's (or the single
 * process's) cluster session backend; its api is the backend (stats).
 */
const sessionService = {
  name: 'session',
  start: function startSessionService () {
    return { api: attachSessionBackend(require('../bus').internalBus) }
  }
}

module.exports = { attachSessionBackend, backendFor, sessionService, TOPIC }
