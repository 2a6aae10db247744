'use strict'

/**
 * The public bus: one `bus` object with the same API in the primary, in
 * workers and in single-process mode, a facade over this process's bus
 * runtime (./runtime.js), which the clusterize runtime wires up. It carries
 * only the app's messages: the library's own pub/sub is ./library.js, its
 * requests are lib/services.
 */

const { timeoutOf } = require('./core')
const { checkAppTopic } = require('./codec')
const { ClusterizeBusError } = require('./errors')
const { busRuntime } = require('./runtime')

const core = busRuntime.core

function transportFor (method) {
  const transport = core.transport
  if (transport === null) {
    throw new ClusterizeBusError(
      `${method}: the bus is not running in this process. It starts when clusterize() runs ` +
      '(in the primary, in each worker, and with workers: 0). Listeners and handlers can be registered at any time; ' +
      'send messages once clusterize() has started (e.g. from inside your app factory or on handle.ready).',
      'ERR_CLUSTERIZE_BUS_NOT_STARTED')
  }
  return transport
}

/** @typedef {{ topic: string, from: number|'primary', generation: number|null, host?: string }} BusMeta */

/**
 * The bus API. Methods do not depend on `this`, so they can be destructured.
 */
function createBusApi () {
  const check = checkAppTopic
  const api = {
    /**
     * Call `handler(data, meta)` for every message on `topic`.
     * @param {string} topic
     * @param {(data: *, meta: BusMeta) => void} handler
     * @returns {object} the bus, for chaining
     */
    on: function on (topic, handler) {
      check(topic, 'bus.on')
      core.addListener(topic, handler, false, 'bus.on')
      return api
    },

    /**
     * Like on(), for the next message only. Without a handler, returns a
     * Promise of `{ data, meta }` for the next message on `topic`.
     * @param {string} topic
     * @param {(data: *, meta: BusMeta) => void} [handler]
     */
    once: function once (topic, handler) {
      check(topic, 'bus.once')
      if (handler === undefined) {
        return new Promise(function next (resolve) {
          core.addListener(topic, function onceResolve (data, meta) { resolve({ data, meta }) }, true, 'bus.once')
        })
      }
      core.addListener(topic, handler, true, 'bus.once')
      return api
    },

    /**
     * Remove a listener added with on() or once(); without `handler`, every listener of `topic`.
     * @param {string} topic
     * @param {Function} [handler]
     * @returns {object} the bus, for chaining
     */
    off: function off (topic, handler) {
      core.removeListener(topic, handler)
      return api
    },

    /**
     * Send to every worker (on this host and, with bus.redis, on others) and to
     * the primary's listeners. The sender's own listeners run only with
     * `{ self: true }`. Throws synchronously on a bad topic, data that cannot be
     * serialised, or data over bus.maxMessageBytes.
     * @param {string} topic
     * @param {*} [data]
     * @param {{ self?: boolean }} [options]
     */
    broadcast: function broadcast (topic, data, options) {
      check(topic, 'bus.broadcast')
      const transport = transportFor('bus.broadcast')
      transport.broadcast(topic, core.codec.encode(topic, data), Boolean(options && options.self))
    },

    /**
     * Send to one worker slot (the slot's ready process), or to 'primary'.
     * Fire and forget: a message to a slot with no live worker is dropped (in
     * the primary and in single-process mode, send() then returns false).
     * @param {number|'primary'} workerId
     * @param {string} topic
     * @param {*} [data]
     * @returns {boolean}
     */
    send: function send (workerId, topic, data) {
      if (workerId !== 'primary' && !(Number.isInteger(workerId) && workerId >= 0)) {
        throw new ClusterizeBusError(`bus.send: workerId must be a worker slot id (an integer >= 0) or 'primary', got ${String(workerId)}`, 'ERR_CLUSTERIZE_BUS_TARGET')
      }
      check(topic, 'bus.send')
      const transport = transportFor('bus.send')
      return transport.send(workerId, topic, core.codec.encode(topic, data))
    },

    /**
     * Register the handler that answers request() (in the primary) and gather()
     * (in each worker) for `topic`. One per topic per process; `fn` may be async.
     * @param {string} topic
     * @param {(data: *, meta: BusMeta) => *} fn
     * @returns {() => void} removes the handler
     */
    handle: function handle (topic, fn) {
      check(topic, 'bus.handle')
      return core.setHandler(topic, fn)
    },

    /**
     * Ask the primary's handler for `topic`. Rejects with the handler's error
     * message if it throws, with ERR_CLUSTERIZE_BUS_TIMEOUT after `timeoutMs`
     * (default 5000).
     * @param {string} topic
     * @param {*} [data]
     * @param {{ timeoutMs?: number }} [options]
     * @returns {Promise<*>}
     */
    request: function request (topic, data, options) {
      check(topic, 'bus.request')
      const timeoutMs = timeoutOf(options, 'bus.request')
      const transport = transportFor('bus.request')
      return transport.request(topic, core.codec.encode(topic, data), timeoutMs)
    },

    /**
     * Ask every ready worker's handler for `topic`. Resolves (never rejects for
     * a worker's failure) with an array of `{ workerId, pid, result }` or
     * `{ workerId, pid, error }`, sorted by workerId, with a `missing` property:
     * the ids of workers that had not answered when `timeoutMs` (default 5000)
     * passed. A worker that exits while the gather waits counts as an error
     * entry at once (code ERR_CLUSTERIZE_WORKER_EXIT).
     * @param {string} topic
     * @param {*} [data]
     * @param {{ timeoutMs?: number }} [options]
     * @returns {Promise<Array<object> & { missing: Array<number> }>}
     */
    gather: function gather (topic, data, options) {
      check(topic, 'bus.gather')
      const timeoutMs = timeoutOf(options, 'bus.gather')
      const transport = transportFor('bus.gather')
      return transport.gather(topic, core.codec.encode(topic, data), timeoutMs)
    },

    /**
     * Resolves once this worker's queue towards the primary is back under half
     * of bus.maxQueuedBytes (or its channel closed): await it after an
     * ERR_CLUSTERIZE_BUS_BACKPRESSURE error, then send again. Resolves at once
     * in the primary, with workers: 0 and before the bus has started (none of
     * them throws that error).
     * @returns {Promise<void>}
     */
    drained: function drained () {
      const transport = core.transport
      return transport !== null && typeof transport.drained === 'function' ? transport.drained() : Promise.resolve()
    },

    /**
     * Call `handler({ workerId, count, topic })` in a worker when the primary
     * dropped `count` of this worker's messages to worker `workerId` because
     * that worker is stuck (it read nothing for bus.stallTimeoutMs). A live
     * receiver never loses a message: this is the only loss, and it is reported.
     * @param {(info: { workerId: number, count: number, topic: string }) => void} handler
     * @returns {() => void} removes the handler
     */
    onDropped: function onDropped (handler) {
      if (typeof handler !== 'function') {
        throw new ClusterizeBusError(`bus.onDropped(handler): handler must be a function, got ${typeof handler}`, 'ERR_CLUSTERIZE_BUS_HANDLER')
      }
      const entry = function dropHandler (info) { handler(info) }
      core.dropHandlers.push(entry)
      return function removeDropHandler () {
        const index = core.dropHandlers.indexOf(entry)
        if (index !== -1) core.dropHandlers.splice(index, 1)
      }
    }
  }
  return api
}

/** The public bus. */
const bus = createBusApi()

Object.defineProperty(bus, 'role', {
  enumerable: false,
  get () { return core.transport === null ? 'none' : core.transport.role }
})

module.exports = { bus, busRuntime, transportFor, ClusterizeBusError }
