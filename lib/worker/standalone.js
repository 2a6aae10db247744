'use strict'

/**
 * `workers: 0`: everything in one process with the primary's handle and API,
 * for development, tests and tiny deployments.
 */

const EventEmitter = require('events')
const { createHealthSampler } = require('./heartbeat')
const { listenServer } = require('./listen')
const { prepareServer, drainServer } = require('./serve')
const { busRuntime } = require('../bus')
const { startServices, closeServices } = require('../services')
const { singletonStats } = require('../state/singleton-stats')
const { setSessionLogger } = require('../session/log')
const { handleSignals } = require('../signals')
const { createLogger } = require('../logger')

/**
 * @param {Function|string} createApp
 * @param {object} config resolved configuration
 */
function startStandalone (createApp, config) {
  const log = createLogger(config.logger, '')
  const handle = new EventEmitter()
  let tracker = null
  let sampler = null
  let shutdownPromise = null
  handle.id = 0
  handle.generation = 1
  handle.app = null
  handle.server = null
  // The bus and the cluster session store live in this process.
  busRuntime.configure(config.bus, { logger: log, role: 'local' })
  setSessionLogger(log)
  const services = startServices({ config, log })
  Object.defineProperty(handle, 'bus', { enumerable: true, get: () => require('../bus').bus })

  handle.ready = (async () => {
    const { prepareAppState, appDirOf } = require('./app-state')
    const appState = await prepareAppState({ appDir: appDirOf(createApp), config, log, workers: 1 })
    const built = await prepareServer(createApp, config, { log })
    appState.afterBuild()
    if (built.listenedByApp) log.warn(require('./pitfalls').listenWarning(config.port))
    handle.app = built.app
    handle.server = built.server
    tracker = built.tracker
    const address = await listenServer(built.server, { port: config.port, host: config.host })
    sampler = createHealthSampler(tracker, { onFdExhausted: (err) => log.warn(`out of file descriptors (${err.code || err.message}): stats carry the last known RSS and show fdExhausted`) })
    log.info(`single process ${process.pid} listening on port ${address.port}`)
    const reloadsAsked = [config.reload.cron ? 'reload.cron' : null, config.watch ? 'watch' : null].filter(Boolean)
    if (reloadsAsked.length > 0) log.warn(`${reloadsAsked.join(' and ')} ignored: single-process mode (workers: 0) cannot reload itself`)
    const worker = { id: 0, pid: process.pid, generation: 1, state: 'ready' }
    handle.emit('worker:ready', worker)
    return { port: address.port, workers: [worker] }
  })()
  handle.ready.catch((err) => log.error(`failed to start: ${err.message}`))

  handle.reload = async function reload () {
    const result = { ok: false, rolledBack: false, reason: 'reload needs workers: single-process mode (workers: 0) cannot replace itself', replaced: 0, durationMs: 0, generation: 1 }
    log.warn(`reload skipped: ${result.reason}`)
    handle.emit('reload:done', result)
    return result
  }

  handle.shutdown = function shutdown () {
    if (shutdownPromise) return shutdownPromise
    handle.emit('shutdown')
    shutdownPromise = (async () => {
      const forced = await drainServer({ server: handle.server, tracker, listening: true, log }, config.shutdown.timeoutMs, 'shutdown')
      if (sampler) sampler.stop()
      await closeServices()
      await busRuntime.close()
      log.info(forced ? 'shutdown forced at the deadline' : 'shutdown complete')
      return { code: forced ? 1 : 0, forced }
    })()
    return shutdownPromise
  }

  handle.stats = function stats () {
    const figures = sampler ? sampler.sample() : null
    return {
      pid: process.pid,
      port: handle.server && handle.server.address() ? handle.server.address().port : config.port,
      scheduling: 'single-process',
      generation: 1,
      ready: Boolean(sampler) && !shutdownPromise,
      live: true,
      crashLooping: false,
      shuttingDown: Boolean(shutdownPromise),
      reloads: 0,
      workers: [{ id: 0, pid: process.pid, generation: 1, state: shutdownPromise ? 'stopping' : 'ready', uptimeMs: Math.round(process.uptime() * 1000), restarts: 0, heartbeat: figures }],
      bus: busRuntime.status(),
      sessions: services.get('session') ? services.get('session').stats() : null,
      singletons: singletonStats(services.get('singleton'), [{ id: 0, pid: process.pid }])
    }
  }

  handle.address = () => ({ port: handle.server && handle.server.address() ? handle.server.address().port : config.port, host: config.host })

  handleSignals({
    shutdownSignals: config.shutdown.signals,
    reloadSignal: config.reload.signal,
    shutdown: () => handle.shutdown(),
    reload: handle.reload,
    log
  })
  return handle
}

module.exports = { startStandalone }
