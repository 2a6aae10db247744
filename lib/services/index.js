'use strict'

/**
 * The internal service layer: a feature registers a primary-side service
 * (./list.js, ./host.js) and its worker-side code talks to it through a
 * client, `serviceClient(name)`, with request/response (ids, timeouts,
 * backpressure: ./remote.js) and fire-and-forget notifications. Not part of
 * the public API; the public bus carries only the app's messages.
 *
 * Where a client's calls go, in this process:
 *   a worker                     over IPC to the primary's host (attachToPrimary)
 *   the primary, `workers: 0`    to the host started here (startServices), in-process
 *   anything else (a plain `node app.js`, a test)  to a host started here on first use
 */

const cluster = require('cluster')
const debug = require('debug')('clusterize:services')
const { createServiceHost } = require('./host')
const { createRemote } = require('./remote')
const { ClusterizeTimeoutError } = require('../errors')
const { ClusterizeBusError } = require('../bus/errors')
const { withTimeout } = require('../bus/core')
const { encodeAppData, decodeAppData } = require('./app-data')

function payloadSize (payload) {
  if (typeof payload === 'string') return payload.length
  return payload && typeof payload.length === 'number' ? payload.length : 0
}

const DEFAULT_TIMEOUT_MS = 5000

const state = {
  /** @type {ReturnType<typeof createServiceHost>|null} */
  host: null,
  /** The host was started on first use, outside clusterize(): clusterize() may replace it. */
  implicit: false,
  /** @type {ReturnType<typeof createRemote>|null} */
  remote: null,
  disconnectListener: null,
  /** The resolved clusterize() configuration of this process, once the runtime started. */
  config: null,
  /** What each service's client does with the primary's pushes: service name -> (method, data) => void. */
  pushHandlers: new Map()
}

/** Callers in-process are worker slot 0 of this process (as in single-process mode). */
const LOCAL_CALLER = Object.freeze({ id: 0, pid: process.pid, generation: 1 })

/**
 * Primary and `workers: 0`: start every service of the list in this process.
 * @param {{ config: object, log: object, isRetiringPid?: (pid: number) => boolean }} context
 * @param {Array<object>} [definitions] the services (./list.js by default)
 * @returns {ReturnType<typeof createServiceHost>}
 */
function startServices (context, definitions) {
  if (state.host !== null && !state.implicit) return state.host
  if (state.host !== null) {
    debug('replacing the services started before clusterize()')
    state.host.close()
  }
  state.host = createServiceHost(definitions || require('./list').SERVICES, context)
  state.implicit = false
  if (context && context.config) state.config = context.config
  return state.host
}

/**
 * Worker: send calls to the primary over `channel`.
 * @param {{ channel: import('../ipc').Channel, maxQueuedBytes: number, config?: object }} options
 *   `config`: the resolved configuration (the primary's bounds, which clients may need to know)
 */
function attachToPrimary (options) {
  if (options.config) state.config = options.config
  if (state.remote !== null) state.remote.failAll('the worker attached to a new channel')
  const remote = createRemote(Object.assign({}, options, { onPush: deliverPush }))
  state.remote = remote
  if (state.disconnectListener !== null) process.removeListener('disconnect', state.disconnectListener)
  state.disconnectListener = null
  if (options.channel.peer === process) {
    state.disconnectListener = function primaryGone () { remote.failAll('the IPC channel to the primary closed') }
    process.once('disconnect', state.disconnectListener)
  }
}

/** A push from the primary's service `name` (never throws: a handler's error is traced). */
function deliverPush (name, method, data) {
  const handler = state.pushHandlers.get(name)
  if (handler === undefined) {
    debug('push %s.%s: no handler in this worker, dropped', name, method)
    return
  }
  try {
    handler(method, data)
  } catch (err) {
    debug('push %s.%s failed: %s', name, method, err && err.stack)
  }
}

/** Worker: an envelope of kind SERVICE from the primary. Never throws. */
function onPrimaryMessage (message) {
  if (state.remote === null) return
  try {
    state.remote.onPrimaryMessage(message)
  } catch (err) {
    debug('service reply failed: %s', err && err.stack)
  }
}

/** Shutdown: fail the calls still waiting, close the services started here. */
function closeServices () {
  if (state.remote !== null) state.remote.failAll('the services were closed')
  const host = state.host
  state.host = null
  return host === null ? Promise.resolve() : host.close()
}

/**
 * The primary-side `api` of a service started in this process.
 * @param {string} name
 * @returns {*} undefined when no host runs here or the service has no api
 */
function localService (name) {
  return state.host === null ? undefined : state.host.get(name)
}

function hostForInProcessCalls () {
  if (state.host !== null) return state.host
  if (cluster.isWorker) return null
  state.host = createServiceHost(require('./list').SERVICES, { config: require('../config').DEFAULTS, log: undefined })
  state.implicit = true
  return state.host
}

function notStarted (what) {
  return new ClusterizeBusError(`service call ${what}: this worker is not connected to its primary yet (clusterize() has not started here)`, 'ERR_CLUSTERIZE_BUS_NOT_STARTED')
}

/**
 * `data` as it travels: with `encode`, the bus codec's encoding (checked and
 * copied like a bus message; throws ClusterizeBusError synchronously).
 */
function prepare (what, data, options) {
  if (!(options && options.encode)) return { data, bytes: options && options.bytes > 0 ? options.bytes : 0, encoded: false }
  const payload = encodeAppData(what, data)
  return { data: payload, bytes: payloadSize(payload), encoded: true }
}

/**
 * A client of the service `name`, usable in any process.
 * @param {string} name as in ./list.js
 * @param {{ timeoutMs?: number }} [options] the default timeout of request()
 * @returns {{ request: Function, notify: Function }}
 */
function serviceClient (name, options) {
  const defaultTimeoutMs = (options && options.timeoutMs) || DEFAULT_TIMEOUT_MS
  return {
    /**
     * Ask the service; resolves with its handler's answer.
     * @param {string} method
     * @param {*} [data] plain data (the IPC channel encodes it once)
     * @param {{ timeoutMs?: number, bytes?: number, encode?: boolean, onWritten?: Function }} [callOptions]
     *   `bytes`: the caller's estimate of data's size (backpressure counts it until the answer);
     *   `encode`: data holds the app's values: encode it with the bus codec (throws synchronously when
     *   the bus would refuse it);
     *   `onWritten(err)`: over IPC only, told once the call has been written to the OS (it reaches
     *   the primary even if this process dies now); never for in-process calls or refused ones
     * @returns {Promise<*>}
     */
    request: function request (method, data, callOptions) {
      const what = `${name}.${method}`
      const timeoutMs = (callOptions && callOptions.timeoutMs) || defaultTimeoutMs
      const sent = prepare(what, data, callOptions)
      if (state.remote !== null) return state.remote.request(name, method, sent.data, timeoutMs, sent.bytes, sent.encoded, callOptions && callOptions.onWritten)
      const host = hostForInProcessCalls()
      if (host === null) return Promise.reject(notStarted(what))
      let result
      try {
        result = host.run(name, method, sent.encoded ? decodeAppData(sent.data) : sent.data, LOCAL_CALLER)
      } catch (err) {
        return Promise.reject(err)
      }
      // Most handlers answer at once (the session store's): no timer for those. One that never
      // settles must not hold its caller forever: the same timeout as over IPC.
      if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
        return withTimeout(Promise.resolve(result), timeoutMs, () => new ClusterizeTimeoutError(`service call ${what}: no answer within ${timeoutMs} ms`))
      }
      return Promise.resolve(result)
    },

    /**
     * Tell the service something; no answer. Throws (sending nothing) on
     * backpressure, or with `encode` when the bus would refuse the data.
     * @param {string} method
     * @param {*} [data]
     * @param {{ bytes?: number, encode?: boolean }} [callOptions]
     * @returns {boolean} false when it could not be sent (no channel to the primary)
     */
    notify: function notify (method, data, callOptions) {
      const sent = prepare(`${name}.${method}`, data, callOptions)
      if (state.remote !== null) return state.remote.notify(name, method, sent.data, sent.bytes, sent.encoded)
      const host = hostForInProcessCalls()
      if (host === null) return false
      // Later, as over IPC: a notification never runs inside its sender's call.
      process.nextTick(notifyLater, host, name, method, sent.encoded ? decodeAppData(sent.data) : sent.data)
      return true
    },

    /**
     * Whether calls leave this process (a worker talking to its primary over IPC), rather
     * than run in-process (the primary, `workers: 0`, outside clusterize).
     * @returns {boolean}
     */
    remote: function remote () {
      return state.remote !== null
    },

    /**
     * What to do with the service's pushes to this worker (one handler per service;
     * a later call replaces it). A handler runs when its push arrives, in the order the
     * primary sent them; the callbacks of replies that arrived just before it may not have
     * run yet (they are promise reactions), so a push that undoes what a reply grants must
     * be remembered until they have.
     * @param {(method: string, data: *) => void} handler
     */
    onPush: function onPush (handler) {
      state.pushHandlers.set(name, handler)
    }
  }
}

function notifyLater (host, name, method, data) {
  host.notify(name, method, data, LOCAL_CALLER)
}

/**
 * The resolved clusterize() configuration of this process (the primary's,
 * and each worker's, resolved from the same options), or the defaults
 * outside clusterize.
 * @returns {object}
 */
function runtimeConfig () {
  return state.config || require('../config').DEFAULTS
}

module.exports = { serviceClient, runtimeConfig, startServices, attachToPrimary, onPrimaryMessage, closeServices, localService }
