'use strict'

/**
 * How the app-state features (rate limits, singletons, cron runs) reach their
 * primary-side service. Their worker-side code speaks to a tiny client,
 * the one lib/services gives: `request(method, data, { timeoutMs }) ->
 * Promise` and `notify(method, data)`. A service is `{ name, start(context) }`
 * whose start() returns `{ requests, notifications, workerExit, close, api }`.
 */

const cluster = require('cluster')
const debug = require('debug')('clusterize:state')
const { ClusterizeError } = require('../errors')
const { ClusterizeBusError } = require('../bus/errors')

/** Callers in-process are slot 0 of this process, as in single-process mode. */
const LOCAL_CALLER = Object.freeze({ id: 0, pid: process.pid, generation: 1 })

/** One in-process service per name: every store and singleton of the process shares it. */
const local = new Map()

/**
 * A client whose calls run the service's handlers in this process.
 * @param {{ name: string, start: (context: object) => object }} definition
 * @param {object} [context] `{ config, log }` for start()
 * @param {object} [caller] who calls (default: this process)
 * @returns {{ request: Function, notify: Function, started: object }}
 */
function inProcessClient (definition, context, caller) {
  const started = definition.start(context || {}) || {}
  return clientOf(definition.name, started, caller || LOCAL_CALLER)
}

/**
 * A client over already started handlers, calling as `caller` (tests
 * model several workers of one primary with several callers).
 */
function clientOf (name, started, caller) {
  return {
    started,
    request (method, data) {
      const fn = started.requests && started.requests[method]
      if (typeof fn !== 'function') return Promise.reject(new ClusterizeError(`service "${name}" has no request "${method}"`, 'ERR_CLUSTERIZE_BUS_NO_HANDLER'))
      return new Promise(function run (resolve) {
        resolve(fn(data, caller))
      })
    },
    notify (method, data) {
      const fn = started.notifications && started.notifications[method]
      if (typeof fn !== 'function') return false
      Promise.resolve().then(() => fn(data, caller)).catch((err) => debug('service %s: notification %s failed: %s', name, method, err.message))
      return true
    }
  }
}

/**
 * The client of a service: in a clusterize worker, over the internal
 * service layer to the primary; elsewhere, the service started in this
 * process on first use.
 * @param {{ name: string, start: Function }} definition
 */
function serviceClient (definition) {
  if (cluster.isWorker && process.env.CLUSTERIZE_WORKER_ID !== undefined) {
    // The internal service layer (lib/services) is not on this branch yet,
    // and these features must not ride the public bus: a worker refuses plainly.
    throw new ClusterizeBusError(`clusterize ${definition.name}: the primary-side service cannot be reached from a worker in this build ` +
      '(the internal service layer is not wired yet)', 'ERR_CLUSTERIZE_BUS_NOT_STARTED')
  }
  let client = local.get(definition.name)
  if (!client) {
    client = inProcessClient(definition, { config: require('../config').DEFAULTS })
    local.set(definition.name, client)
  }
  return client
}

/**
 * Whether this process can reach the app-state services: false in a worker
 * until the internal service layer carries them.
 * @returns {boolean}
 */
function primaryReachable () {
  return !(cluster.isWorker && process.env.CLUSTERIZE_WORKER_ID !== undefined)
}

module.exports = { serviceClient, inProcessClient, clientOf, primaryReachable, LOCAL_CALLER }
