'use strict'

/**
 * The bus runtime of this process: the core (listeners, handlers, codec),
 * its transport (to the workers, to the primary, or local) and the Redis
 * bridge. The clusterize runtime drives it; the public `bus` (./index.js) is
 * a facade over it. There is one per process, because the public `bus` is
 * one per process.
 *
 * Call order (lib/primary and lib/worker do this; users never do):
 *   primary:     configure(config.bus, { logger, role: 'primary' })
 *                addWorker(record) / onWorkerMessage(record, env) / removeWorker(record)
 *                close()                                      at shutdown (closes Redis)
 *   worker:      configure(config.bus, { logger, role: 'worker' })
 *                attachToPrimary({ channel, id, generation }) / onPrimaryMessage(env)
 *   workers: 0:  configure(config.bus, { logger, role: 'local' })
 *
 * Until one of those runs, listeners and handlers can be registered but
 * broadcast/send/request/gather throw ERR_CLUSTERIZE_BUS_NOT_STARTED.
 */

const cluster = require('cluster')
const EventEmitter = require('events')
const debug = require('debug')('clusterize:bus')
const { BusCore, wrapLogger } = require('./core')
const { createCodec } = require('./codec')
// Each process needs one transport: loaded by role, so the primary does not hold the worker's code.
const createPrimaryTransport = (core) => require('./primary').createPrimaryTransport(core)
const createWorkerTransport = (core, options) => require('./worker').createWorkerTransport(core, options)
const createLocalTransport = (core) => require('./local').createLocalTransport(core)

/** The bus options' defaults live with every other option's, in lib/config.js. */
const DEFAULT_CONFIG = require('../config').DEFAULTS.bus

/**
 * @fires BusRuntime#bridge:up
 * @fires BusRuntime#bridge:down
 */
class BusRuntime extends EventEmitter {
  constructor () {
    super()
    this.core = new BusCore()
    this.config = Object.assign({}, DEFAULT_CONFIG)
    this.hostId = undefined
    this.disconnectListener = null
  }

  /**
   * Apply the bus options (already validated by lib/config.js). In the
   * primary and with role 'local' this starts the Redis bridge when
   * `busConfig.redis` is set.
   * @param {{ redis?: *, channel?: string, serialization?: 'json'|'advanced', maxMessageBytes?: number, maxQueuedBytes?: number }} busConfig
   * @param {{ logger?: object, log?: object, role?: 'primary'|'worker'|'local', hostId?: string }} [options]
   *   `role` defaults to 'worker' in a cluster worker, else 'primary'
   */
  configure (busConfig, options) {
    options = options || {}
    const core = this.core
    this.config = Object.assign({}, DEFAULT_CONFIG, busConfig)
    core.codec = createCodec(this.config)
    core.log = wrapLogger(options.logger || options.log)
    core.warned.clear()
    core.stallTimeoutMs = this.config.stallTimeoutMs
    if (options.hostId !== undefined) this.hostId = String(options.hostId)
    const role = options.role || (cluster.isWorker ? 'worker' : 'primary')
    if (role === 'primary') {
      if (core.transport === null || core.transport.role !== 'primary') core.transport = createPrimaryTransport(core)
      this.startBridge()
    } else if (role === 'local') {
      this.useLocal()
    }
  }

  startBridge () {
    const core = this.core
    if (core.bridge !== null) {
      const old = core.bridge
      core.bridge = null
      old.close().catch(() => {})
    }
    if (!this.config.redis) return
    const { createRedisBridge } = require('./redis-bridge')
    core.bridge = createRedisBridge({
      redis: this.config.redis,
      channel: this.config.channel,
      sharded: this.config.shardedPubSub,
      outageBufferBytes: this.config.outageBufferBytes,
      codec: core.codec,
      log: core.log,
      hostId: this.hostId,
      onStateChange: (state) => this.emit(state.connected ? 'bridge:up' : 'bridge:down', state),
      onMessage: function fromOtherHost (topic, payload, from, generation, host) {
        if (core.transport !== null && typeof core.transport.fromBridge === 'function') {
          core.transport.fromBridge(topic, payload, from, generation, host)
        }
      }
    })
  }

  primaryTransport () {
    const core = this.core
    if (core.transport === null) core.transport = createPrimaryTransport(core)
    return core.transport.role === 'primary' ? core.transport : null
  }

  /**
   * Primary: a worker was forked. Routing is by record (a slot may have
   * several records at once during a reload).
   * @param {import('../primary/worker-record').WorkerRecord} record
   */
  addWorker (record) {
    const transport = this.primaryTransport()
    if (transport) transport.addWorker(record)
  }

  /** Primary: a worker exited; gathers waiting on it count it as failed at once. */
  removeWorker (record) {
    const transport = this.core.transport
    if (transport && transport.role === 'primary') transport.removeWorker(record)
  }

  /** Primary: an envelope of kind 'bus' from a worker. Never throws. */
  onWorkerMessage (record, envelope) {
    const transport = this.core.transport
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
  attachToPrimary (options) {
    if (!options || !options.channel || typeof options.channel.post !== 'function') {
      throw new TypeError('attachToPrimary({ channel, id, generation }): channel must be an ipc.Channel')
    }
    const core = this.core
    if (core.transport && core.transport.role === 'worker') core.transport.close()
    const transport = createWorkerTransport(core, options)
    core.transport = transport
    if (this.disconnectListener) process.removeListener('disconnect', this.disconnectListener)
    this.disconnectListener = null
    if (options.channel.peer === process) {
      this.disconnectListener = function primaryGone () {
        transport.failAll('the IPC channel to the primary closed')
      }
      process.once('disconnect', this.disconnectListener)
    }
  }

  /**
   * Worker: this process now serves slot `id` (a warm spare was promoted); the
   * primary already routes by the new id, this makes the worker's own messages say so.
   * @param {number} id
   */
  setWorkerId (id) {
    const transport = this.core.transport
    if (transport && transport.role === 'worker') transport.setId(id)
  }

  /** Worker: an envelope of kind 'bus' from the primary. Never throws. */
  onPrimaryMessage (envelope) {
    const transport = this.core.transport
    if (!transport || transport.role !== 'worker') return
    try {
      transport.onPrimaryMessage(envelope)
    } catch (err) {
      debug('bus envelope from the primary failed: %s', err && err.stack)
    }
  }

  /** Single-process mode: everything is answered in this process (and bridged if configured). */
  useLocal () {
    const core = this.core
    core.transport = createLocalTransport(core)
    if (this.config.redis && core.bridge === null) this.startBridge()
  }

  /**
   * For /ready and /stats.
   * @returns {{ role: string, serialization: string, maxMessageBytes: number, maxQueuedBytes: number, bridge: object|null }}
   */
  status () {
    const core = this.core
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
  close () {
    const core = this.core
    const transport = core.transport
    core.transport = null
    if (transport) transport.close()
    if (this.disconnectListener) process.removeListener('disconnect', this.disconnectListener)
    this.disconnectListener = null
    const bridge = core.bridge
    core.bridge = null
    return bridge ? bridge.close() : Promise.resolve()
  }
}

/** This process's bus runtime. */
const busRuntime = new BusRuntime()

module.exports = { busRuntime, BusRuntime }
