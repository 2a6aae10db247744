'use strict'

/**
 * The process-wide bus: one `bus` object with the same API in the primary, in
 * workers and in single-process mode, plus the hooks the clusterize runtime
 * calls to wire it up.
 *
 * Call order (done by lib/primary and lib/worker; users never call these):
 *   primary:        configureBus(config.bus, { logger })
 *                   busAddWorker(record)            for each forked worker
 *                   busOnWorkerMessage(record, env) for each envelope of kind 'bus'
 *                   busRemoveWorker(record)         when that worker exits
 *                   busClose()                      at shutdown (closes Redis)
 *   worker:         configureBus(config.bus, { logger })
 *                   busAttachToPrimary({ channel, id, generation })
 *                   busOnPrimaryMessage(env)        for each envelope of kind 'bus'
 *   workers: 0:     configureBus(config.bus, { logger }); busUseLocal()
 *
 * Until one of those runs, listeners and handlers can be registered but
 * broadcast/send/request/gather throw ERR_CLUSTERIZE_BUS_NOT_STARTED.
 */

const cluster = require('cluster')
const debug = require('debug')('clusterize:bus')
const { BusCore, wrapLogger, timeoutOf } = require('./core')
const { createCodec, checkTopic, checkPublicTopic } = require('./codec')
const { ClusterizeBusError } = require('./errors')
const { createPrimaryTransport } = require('./primary')
const { createWorkerTransport } = require('./worker')
const { createLocalTransport } = require('./local')

/** The bus options' defaults live with every other option's, in lib/config.js. */
const DEFAULT_CONFIG = require('../config').DEFAULTS.bus

const core = new BusCore()
let config = Object.assign({}, DEFAULT_CONFIG)
let hostId
let disconnectListener = null

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
 * Topics starting with `$cz:` are reserved for clusterize's own traffic
 * (the cluster session store, adapters): the public `bus` refuses them,
 * `internalBus` (library code only) accepts them.
 * @param {boolean} reservedAllowed
 */
function createBusApi (reservedAllowed) {
  const check = reservedAllowed ? checkTopic : checkPublicTopic
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
     * message if it throws, with ERR_CLUSTERIZE_TIMEOUT after `timeoutMs`
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
    }
  }
  return api
}

/** The public bus. */
const bus = createBusApi(false)
/** For library code: accepts the reserved `$cz:` topics. */
const internalBus = createBusApi(true)

Object.defineProperty(bus, 'role', {
  enumerable: false,
  get () { return core.transport === null ? 'none' : core.transport.role }
})

// ---- runtime hooks ---------------------------------------------------------

/**
 * Apply the bus options (already validated by lib/config.js). In the primary
 * (and with workers: 0) this starts the Redis bridge when `busConfig.redis` is set.
 * `role` defaults to 'worker' in a cluster worker, else 'primary'; 'local' is
 * the same as calling busUseLocal() afterwards.
 * @param {{ redis?: *, channel?: string, serialization?: 'json'|'advanced', maxMessageBytes?: number, maxQueuedBytes?: number }} busConfig
 * @param {{ logger?: object, log?: object, role?: 'primary'|'worker'|'local', hostId?: string }} [options]
 */
function configureBus (busConfig, options) {
  options = options || {}
  config = Object.assign({}, DEFAULT_CONFIG, busConfig)
  core.codec = createCodec(config)
  core.log = wrapLogger(options.logger || options.log)
  core.warned.clear()
  if (options.hostId !== undefined) hostId = String(options.hostId)
  const role = options.role || (cluster.isWorker ? 'worker' : 'primary')
  if (role === 'primary') {
    if (core.transport === null || core.transport.role !== 'primary') core.transport = createPrimaryTransport(core)
    startBridge()
  } else if (role === 'local') {
    core.transport = createLocalTransport(core)
    startBridge()
  }
}

function startBridge () {
  if (core.bridge !== null) {
    const old = core.bridge
    core.bridge = null
    old.close().catch(() => {})
  }
  if (!config.redis) return
  const { createRedisBridge } = require('./redis-bridge')
  core.bridge = createRedisBridge({
    redis: config.redis,
    channel: config.channel,
    codec: core.codec,
    log: core.log,
    hostId,
    onMessage: function fromOtherHost (topic, payload, from, generation, host) {
      if (core.transport !== null && typeof core.transport.fromBridge === 'function') {
        core.transport.fromBridge(topic, payload, from, generation, host)
      }
    }
  })
}

function primaryTransport () {
  if (core.transport === null) core.transport = createPrimaryTransport(core)
  return core.transport.role === 'primary' ? core.transport : null
}

/**
 * Primary: a worker was forked. `record` = { id (slot), pid, generation, channel: ipc.Channel, state? }.
 * The same slot id may have several records at once (reload); routing is by record.
 * @param {object} record
 */
function busAddWorker (record) {
  const transport = primaryTransport()
  if (transport) transport.addWorker(record)
}

/**
 * Primary: a worker exited. Gathers waiting on it count it as failed at once;
 * answers to its own pending requests are dropped.
 * @param {object} record
 */
function busRemoveWorker (record) {
  const transport = core.transport
  if (transport && transport.role === 'primary') transport.removeWorker(record)
}

/**
 * Primary: an envelope of kind 'bus' from a worker. Never throws.
 * @param {object} record
 * @param {object} envelope
 */
function busOnWorkerMessage (record, envelope) {
  const transport = core.transport
  if (!transport || transport.role !== 'primary') return
  try {
    transport.onWorkerMessage(record, envelope)
  } catch (err) {
    debug('bus envelope from worker %s failed: %s', record && record.id, err && err.stack)
  }
}

/**
 * Worker: connect the bus to the primary.
 * @param {{ channel: import('../ipc').Channel, id: number, generation?: number }} options
 */
function busAttachToPrimary (options) {
  if (!options || !options.channel || typeof options.channel.post !== 'function') {
    throw new TypeError('busAttachToPrimary({ channel, id, generation }): channel must be an ipc.Channel')
  }
  if (core.transport && core.transport.role === 'worker') core.transport.close()
  const transport = createWorkerTransport(core, options)
  core.transport = transport
  const peer = options.channel.peer
  if (disconnectListener) process.removeListener('disconnect', disconnectListener)
  disconnectListener = null
  if (peer === process) {
    disconnectListener = function primaryGone () {
      transport.failAll('the IPC channel to the primary closed')
    }
    process.once('disconnect', disconnectListener)
  }
}

/**
 * Worker: an envelope of kind 'bus' from the primary. Never throws.
 * @param {object} envelope
 */
function busOnPrimaryMessage (envelope) {
  const transport = core.transport
  if (!transport || transport.role !== 'worker') return
  try {
    transport.onPrimaryMessage(envelope)
  } catch (err) {
    debug('bus envelope from the primary failed: %s', err && err.stack)
  }
}

/**
 * Single-process mode (workers: 0): everything is answered in this process.
 * Starts the Redis bridge if configured and not yet running.
 */
function busUseLocal () {
  core.transport = createLocalTransport(core)
  if (config.redis && core.bridge === null) startBridge()
}

/**
 * For /ready and /stats.
 * @returns {{ role: string, serialization: string, maxMessageBytes: number, bridge: object|null }}
 */
function busStatus () {
  const transport = core.transport
  const status = {
    role: transport === null ? 'none' : transport.role,
    serialization: core.codec.name,
    maxMessageBytes: core.codec.maxMessageBytes,
    maxQueuedBytes: core.codec.maxQueuedBytes
  }
  if (transport !== null) Object.assign(status, transport.status())
  status.bridge = core.bridge === null ? null : core.bridge.status()
  return status
}

/**
 * Shutdown: settle pending requests/gathers and close the Redis connections.
 * Listeners and handlers stay registered.
 * @returns {Promise<void>}
 */
function busClose () {
  const transport = core.transport
  core.transport = null
  if (transport) transport.close()
  if (disconnectListener) process.removeListener('disconnect', disconnectListener)
  disconnectListener = null
  const bridge = core.bridge
  core.bridge = null
  return bridge ? bridge.close() : Promise.resolve()
}

module.exports = {
  bus,
  internalBus,
  configureBus,
  busAddWorker,
  busRemoveWorker,
  busOnWorkerMessage,
  busAttachToPrimary,
  busOnPrimaryMessage,
  busUseLocal,
  busStatus,
  busClose,
  ClusterizeBusError
}
