'use strict'

/**
 * How the app-state features (rate limits, singletons, cron runs) reach their
 * primary-side service. Their worker-side code speaks to a tiny client,
 * the one lib/services gives: `request(method, data, { timeoutMs }) ->
 * Promise` and `notify(method, data)`. A service is `{ name, start(context) }`
 * whose start() returns `{ requests, notifications, workerExit, close, api }`.
 */

const debug = require('debug')('clusterize:state')
const { ClusterizeError } = require('../errors')

/** Callers in-process are slot 0 of this process, as in single-process mode. */
const LOCAL_CALLER = Object.freeze({ id: 0, pid: process.pid, generation: 1 })

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
 * The client of a service, from the internal service layer: in a worker,
 * over IPC to the primary's service; in the primary, with `workers: 0` or in
 * a plain `node app.js`, the service started in this process.
 * @param {{ name: string }} definition an entry of lib/services/list.js
 */
function serviceClient (definition) {
  return require('../services').serviceClient(definition.name)
}

module.exports = { serviceClient, inProcessClient, clientOf, LOCAL_CALLER }
