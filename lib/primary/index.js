'use strict'

/**
 * The primary: fork and supervise workers, accept connections (for 'rr' and
 * 'sticky'), reload, watch health, serve probes, shut down gracefully.
 */

const cluster = require('cluster')
const EventEmitter = require('events')
const path = require('path')
const debug = require('debug')('clusterize:primary')
const { Supervisor, publicWorker } = require('./supervisor')
const { createDispatcher } = require('./dispatcher')
const { resolveScheduling, findFreePort } = require('./scheduling')
const { watchHealth } = require('./health')
const { createReloader } = require('./reload')
const { startProbes } = require('./probes')
const { createMetrics } = require('./metrics')
const busLink = require('./bus-link')
const { createLogger } = require('../logger')
const { explainListenError } = require('../errors')
const { formatBanner } = require('./banner')

/**
 * The handle returned by clusterize() in the primary.
 * @fires PrimaryHandle#worker:ready
 * @fires PrimaryHandle#worker:exit
 * @fires PrimaryHandle#reload:done
 * @fires PrimaryHandle#crashloop
 */
class PrimaryHandle extends EventEmitter {}

/**
 * @param {Function|string} createApp checked here, built in the workers
 * @param {object} config resolved configuration
 * @returns {PrimaryHandle}
 */
function startPrimary (createApp, config) {
  const log = createLogger(config.logger, '')
  const handle = new PrimaryHandle()
  const { mode, listenMode } = resolveScheduling(config, log)
  const runtime = { listenMode, port: config.port, onEnvelope: onWorkerEnvelope }
  const supervisor = new Supervisor(config, log, runtime)
  const metrics = createMetrics(supervisor)
  const runReload = createReloader(config, supervisor, log)
  let dispatcher = null
  let probes = null
  let health = null
  let reloadChain = Promise.resolve()
  let shutdownPromise = null
  let signalCount = 0
  let readySettled = false
  const state = { mode, port: config.port, shuttingDown: false, reloads: 0 }

  if (typeof createApp === 'string') require.resolve(path.resolve(createApp))

  cluster.setupPrimary({ serialization: config.bus.serialization })
  busLink.attachPrimary(config, log)
  Object.defineProperty(handle, 'bus', { enumerable: true, get: () => require('../bus').bus })

  supervisor.on('worker:ready', (worker) => handle.emit('worker:ready', worker))
  supervisor.on('worker:exit', (event) => {
    metrics.onExit(event)
    handle.emit('worker:exit', event)
  })
  supervisor.on('worker:fork', (record) => busLink.addWorker(record))
  supervisor.on('record:exit', (record) => busLink.removeWorker(record))
  supervisor.on('crashloop', onCrashLoop)
  supervisor.on('record:heartbeat', watchSessionStore)

  handle.ready = start()
  handle.ready.catch(() => {})

  /** @returns {Promise<object>} the reload result */
  handle.reload = function reload () {
    const run = reloadChain.then(() => {
      if (state.shuttingDown) return { ok: false, rolledBack: false, reason: 'shutting down', replaced: 0, durationMs: 0 }
      return runReload()
    })
    reloadChain = run.catch(() => {})
    return run.then((result) => {
      state.reloads++
      metrics.onReload(result)
      handle.emit('reload:done', result)
      return result
    })
  }

  handle.shutdown = shutdown
  handle.stats = stats
  handle.address = () => ({ port: state.port, host: config.host })
  installSignals()
  return handle

  async function start () {
    if (listenMode === 'handoff') {
      dispatcher = createDispatcher({ mode, port: config.port, host: config.host }, supervisor)
      try {
        const address = await dispatcher.listen()
        state.port = address.port
      } catch (err) {
        explainListenError(err, config.port)
        log.error(`cannot listen: ${err.message}`)
        throw err
      }
    } else if (config.port === 0) {
      // Workers bind the port themselves: they must all agree on one.
      state.port = await findFreePort(config.host)
    }
    runtime.port = state.port
    if (config.probes) {
      probes = await startProbes(config.probes, { stats, metrics, isLive, isReady, degradation })
      state.probesPort = probes.port
    }
    health = watchHealth(config, supervisor, log, recycle)
    supervisor.start()
    log.info(`primary ${process.pid} starting ${config.workers} workers on port ${state.port}`, { scheduling: mode })
    await new Promise((resolve, reject) => {
      function check () {
        if (supervisor.readyRecords().length === config.workers) {
          supervisor.removeListener('record:ready', check)
          supervisor.removeListener('crashloop', fail)
          resolve()
        }
      }
      function fail (info) {
        supervisor.removeListener('record:ready', check)
        reject(new Error(`crash loop before all workers were ready: ${info.lastError}`))
      }
      supervisor.on('record:ready', check)
      supervisor.once('crashloop', fail)
    })
    readySettled = true
    if (config.banner && config.logger === undefined) {
      log.info(formatBanner(stats(), { host: config.host, probesPort: state.probesPort, probesHost: config.probes && config.probes.host, redis: config.bus.redis }).trimEnd())
    }
    return { port: state.port, probesPort: state.probesPort, workers: supervisor.readyRecords().map(publicWorker) }
  }

  function onWorkerEnvelope (record, message) {
    if (message.kind === 'bus') busLink.onWorkerMessage(record, message)
    else if (message.kind === 'accepted' && dispatcher) dispatcher.onAccepted(record)
    else debug('ignoring %s from worker %d', message.kind, record.id)
  }

  /** Replace a worker gracefully: new one ready first, then drain the old. */
  async function recycle (record, reason) {
    if (state.shuttingDown) return
    record.recycling = true
    const successor = supervisor.spawn(record.id, record.generation)
    try {
      await supervisor.waitReady(successor, config.reload.readyTimeoutMs)
    } catch (err) {
      log.error(`could not recycle worker ${record.id}: ${err.message}`)
      supervisor.kill(successor, 'recycle-failed')
      record.recycling = false
      return
    }
    if (state.shuttingDown) return supervisor.retire(successor, 'shutdown', config.shutdown.timeoutMs)
    supervisor.promote(successor)
    return supervisor.retire(record, reason, config.reload.drainTimeoutMs)
  }

  function onCrashLoop (info) {
    metrics.crashLooping = true
    handle.emit('crashloop', info)
    if (supervisor.liveRecords().length === 0 && !state.shuttingDown) {
      log.error(`no worker left after a crash loop; exiting with code 1. Last failure: ${info.lastError}`)
      shutdown().then(() => setImmediate(() => process.exit(1)))
    }
  }

  /** Log when a worker's session store becomes unavailable or recovers. */
  function watchSessionStore (record) {
    const session = record.session
    const down = Boolean(session && session.available === false)
    if (down === Boolean(record.sessionDown)) return
    record.sessionDown = down
    if (down) log.warn(`worker ${record.id}: session store ${session.store} unavailable: ${session.lastError}; session requests get 503 until it recovers`, { pid: record.pid })
    else log.info(`worker ${record.id}: session store ${session ? session.store : ''} available again`, { pid: record.pid })
  }

  /** Why the service is degraded though ready (shown by /ready), or ''. */
  function degradation () {
    for (const record of supervisor.readyRecords()) {
      if (record.sessionDown) return `session store ${record.session.store} unavailable: ${record.session.lastError}`
    }
    return ''
  }

  function isLive () {
    return !supervisor.crashLooping
  }

  function isReady () {
    return !state.shuttingDown && supervisor.readyRecords().length > 0
  }

  /**
   * Stop accepting, drain every worker, and resolve once all have exited.
   * Workers still running at `shutdown.timeoutMs` are killed and the
   * result says so (`forced: true`, `code: 1`).
   * @returns {Promise<{ code: number, forced: boolean }>}
   */
  function shutdown () {
    if (shutdownPromise) return shutdownPromise
    state.shuttingDown = true
    supervisor.stop()
    log.info('shutting down', { workers: supervisor.liveRecords().length })
    handle.emit('shutdown')
    shutdownPromise = (async () => {
      const timeoutMs = config.shutdown.timeoutMs
      const closing = dispatcher ? dispatcher.close() : Promise.resolve()
      const retiring = supervisor.liveRecords()
      await Promise.all(retiring.map((record) => supervisor.retire(record, 'shutdown', timeoutMs)))
      await closing
      const forced = retiring.some((record) => record.forced || record.drainTimedOut)
      if (health) health.stop()
      if (probes) await probes.close()
      await busLink.close()
      const code = forced ? 1 : 0
      log.info(forced ? 'shutdown forced: some workers were killed at the deadline' : 'shutdown complete', { code })
      return { code, forced }
    })()
    return shutdownPromise
  }

  function installSignals () {
    for (const signal of config.shutdown.signals) {
      process.on(signal, function onShutdownSignal () {
        signalCount++
        if (signalCount > 1) {
          log.warn(`second ${signal}: exiting now`)
          for (const record of supervisor.liveRecords()) record.worker.process.kill('SIGKILL')
          process.exit(1)
        }
        shutdown().then((result) => process.exit(result.code))
      })
    }
    if (config.reload.signal) {
      process.on(config.reload.signal, function onReloadSignal () {
        handle.reload().catch((err) => log.error(`reload failed: ${err.message}`))
      })
    }
  }

  function stats () {
    const now = Date.now()
    const workers = supervisor.liveRecords().map((record) => ({
      id: record.id,
      pid: record.pid,
      generation: record.generation,
      state: record.state,
      uptimeMs: now - record.startedAt,
      restarts: record.restarts,
      overloaded: record.overloaded,
      connectionsHanded: listenMode === 'handoff' ? record.connections : undefined,
      heartbeatAgeMs: record.heartbeatAt ? now - record.heartbeatAt : null,
      heartbeat: record.heartbeat,
      session: record.session
    })).sort((a, b) => a.id - b.id || a.generation - b.generation)
    return {
      pid: process.pid,
      port: state.port,
      scheduling: mode,
      generation: supervisor.generation,
      ready: readySettled && isReady(),
      live: isLive(),
      crashLooping: supervisor.crashLooping,
      shuttingDown: state.shuttingDown,
      reloads: state.reloads,
      workers,
      bus: busLink.status(),
      sessions: busLink.sessions()
    }
  }
}

module.exports = { startPrimary }
