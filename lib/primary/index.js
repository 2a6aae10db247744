'use strict'

/**
 * The primary: fork and supervise workers, accept connections (for 'rr' and
 * 'sticky'), reload, watch health, serve probes, shut down gracefully.
 *
 * startPrimary() wires the parts and returns the handle; each step below is
 * one function, in the order a primary lives through them.
 */

const cluster = require('cluster')
const EventEmitter = require('events')
const path = require('path')
const debug = require('debug')('clusterize:primary')
const protocol = require('../protocol')
const { Supervisor } = require('./supervisor')
const { resolveScheduling } = require('./scheduling')
const { bindAppPort } = require('./listen')
const { waitAllReady } = require('./readiness')
const { watchHealth } = require('./health')
const { createReloader } = require('./reload')
const { workerExecArgv } = require('./worker-flags')
const { createMetrics } = require('./metrics')
const { watchSessionStores } = require('./session-watch')
const { buildStats } = require('./stats')
const { busRuntime } = require('../bus')
const { startServices, closeServices } = require('../services')
const { handleSignals } = require('../signals')
const { readInherited, checkInheritedPort } = require('./inherit')
const { createSocketPasser, inheritedScheduling } = require('./pass-sockets')
const upgrades = require('./upgrade')
const { createLogger } = require('../logger')

/**
 * The handle returned by clusterize() in the primary.
 * @fires PrimaryHandle#worker:ready
 * @fires PrimaryHandle#worker:exit
 * @fires PrimaryHandle#reload:done
 * @fires PrimaryHandle#crashloop
 * @fires PrimaryHandle#upgrade:start
 * @fires PrimaryHandle#upgrade:done
 */
class PrimaryHandle extends EventEmitter {}

/**
 * @param {Function|string} createApp checked here, built in the workers
 * @param {object} config resolved configuration
 * @returns {PrimaryHandle}
 */
function startPrimary (createApp, config) {
  if (typeof createApp === 'string') require.resolve(path.resolve(createApp))
  const log = createLogger(config.logger, '')
  const handle = new PrimaryHandle()
  const inherited = readInherited()
  checkInheritedPort(config, inherited)
  const { mode, listenMode } = inheritedScheduling(resolveScheduling(config, log), inherited, log)
  const state = { mode, listenMode, port: inherited.port !== null ? inherited.port : config.port, probesPort: undefined, shuttingDown: false, reloads: 0, readySettled: false }
  const parts = { dispatcher: null, balancer: null, probes: null, health: null, dashboard: null }
  // listenFd: with 'none', workers listen on the inherited socket through node:cluster.
  const runtime = { listenMode, port: state.port, listenFd: listenMode === 'cluster' ? inherited.http : null, route: null, fork: (env) => cluster.fork(env) }
  const supervisor = new Supervisor(config, log, runtime)
  // The app's own prom-client metrics come from the metrics service (lib/state/metrics), started below.
  const metrics = createMetrics(supervisor, () => busRuntime.status(), primaryStatus, () => services.get('metrics'))
  const reloader = createReloader(config, supervisor, log)
  const sessions = watchSessionStores(supervisor, log, (name, info) => handle.emit(name, info))
  const reloads = createReloadQueue()
  const passer = createSocketPasser({ listenMode, inherited, parts, state, config, supervisor })
  const upgrader = upgrades.createUpgrader({
    config,
    log,
    emit: (name, info) => handle.emit(name, info),
    sockets: () => passer.passable(),
    sessions: () => services.get('session'),
    recovery: () => services.get('recovery'),
    isShuttingDown: () => state.shuttingDown,
    retire: (reason) => shutdown(0, reason)
  })
  let shutdownPromise = null

  runtime.route = createRoutes()
  // node:cluster's own default is the primary's flags; a setupPrimary({ execArgv }) the app made first is kept.
  const execArgv = workerExecArgv((cluster.settings && cluster.settings.execArgv) || process.execArgv, process.env.NODE_OPTIONS, config.maxSemiSpaceMB)
  cluster.setupPrimary({ serialization: config.bus.serialization, execArgv })
  busRuntime.configure(config.bus, { logger: log, role: 'primary' })
  // The library's primary-side services (cluster sessions, socket.io recovery): cheap until a worker uses one.
  const services = startServices({ config, log, isRetiringPid: supervisor.isRetiringPid.bind(supervisor), upgrading: inherited.source === 'upgrade' })
  forwardEvents()

  Object.defineProperty(handle, 'bus', { enumerable: true, get: () => require('../bus').bus })
  handle.ready = start()
  handle.ready.catch(() => {})
  handle.reload = reloads.request
  handle.shutdown = () => shutdown()
  handle.upgrade = upgrader.upgrade
  handle.stats = stats
  handle.address = () => ({ port: state.port, host: config.host })
  handleSignals({
    shutdownSignals: config.shutdown.signals,
    reloadSignal: config.reload.signal,
    shutdown: () => shutdown(),
    reload: handle.reload,
    upgradeSignal: config.upgrade.signal,
    upgrade: () => handle.upgrade(),
    forceExit: () => { for (const record of supervisor.liveRecords()) record.worker.process.kill('SIGKILL') },
    log
  })
  return handle

  /** The one routing table for what workers send. */
  function createRoutes () {
    return protocol.createRouter({
      [protocol.KIND.READY]: (record, message) => supervisor.onReady(record, message),
      [protocol.KIND.HEARTBEAT]: (record, message) => supervisor.onHeartbeat(record, message),
      [protocol.KIND.BOOT_ERROR]: (record, message) => supervisor.onBootError(record, message),
      [protocol.KIND.DRAINED]: (record, message) => supervisor.onDrained(record, message),
      [protocol.KIND.BUS]: (record, message) => busRuntime.onWorkerMessage(record, message),
      [protocol.KIND.SERVICE]: (record, message) => services.onWorkerMessage(record, message),
      [protocol.KIND.LISTEN_ASK]: (record) => { if (parts.balancer) parts.balancer.onListenAsk(record) },
      [protocol.KIND.LOAD]: (record, message) => { if (parts.balancer) parts.balancer.onLoad(record, message) },
      [protocol.KIND.LISTENING]: (record, message, socketHandle) => passer.onListening(record, socketHandle)
    }, (record, message) => debug('ignoring %s from worker %d', message.kind, record.id))
  }

  function forwardEvents () {
    supervisor.on('worker:ready', (worker) => handle.emit('worker:ready', worker))
    supervisor.on('worker:exit', (event) => {
      metrics.onExit(event)
      handle.emit('worker:exit', event)
    })
    busRuntime.on('bridge:up', (state) => handle.emit('bridge:up', state))
    busRuntime.on('bridge:down', (state) => handle.emit('bridge:down', state))
    supervisor.on('worker:fork', (record) => {
      busRuntime.addWorker(record)
      services.addWorker(record)
    })
    supervisor.on('record:exit', (record) => {
      busRuntime.removeWorker(record)
      services.removeWorker(record)
    })
    // 'none' on an inherited socket: only the workers' listen says which port it is.
    if (runtime.listenFd !== null && inherited.port === null) supervisor.on('record:ready', learnPort)
    supervisor.on('crashloop', onCrashLoop)
    supervisor.on('record:gone', exitIfNothingServes)
    supervisor.once('boot-fatal', onBootFatal)
  }

  function learnPort (record) {
    if (!record.address || !Number.isInteger(record.address.port)) return
    state.port = runtime.port = record.address.port
    supervisor.removeListener('record:ready', learnPort)
  }

  async function start () {
    // A new primary replacing another accepts nothing until its workers are
    // ready and the old one says go: the old one serves meanwhile.
    const replacing = inherited.source === 'upgrade'
    // 'balanced' workers take the inherited socket as they boot but accept only after go (the balancer holds them at limit 0).
    if (!replacing) await listenAll()
    else if (listenMode === 'balanced') await bindPort()
    parts.health = watchHealth(config, supervisor, log, reloader)
    supervisor.start()
    log.info(`primary ${process.pid} starting ${config.workers} workers on port ${state.port}`, { scheduling: mode })
    try {
      await waitAllReady(supervisor, config.workers)
      if (replacing) {
        await upgrades.awaitGo({ log, sessions: () => services.get('session'), recovery: () => services.get('recovery'), generation: supervisor.generation })
        await listenAll()
        if (parts.balancer !== null) parts.balancer.release()
      }
    } catch (err) {
      if (replacing) upgrades.reportFailure(err.message)
      throw err
    }
    state.readySettled = true
    if (config.banner && config.logger === undefined) {
      log.info(require('../cli/banner').formatBanner(stats(), { host: config.host, probesPort: state.probesPort, probesHost: config.probes && config.probes.host, redis: config.bus.redis }).trimEnd())
    }
    const info = { port: state.port, probesPort: state.probesPort, workers: supervisor.readyRecords().map((record) => record.publicView()) }
    if (replacing) {
      await upgrades.announceServing(info)
      // This primary's own timeline (dashboard) starts with the upgrade that made it.
      handle.emit('upgrade:done', { ok: true, pid: process.pid, previousPid: inherited.from, node: process.version, generation: supervisor.generation, durationMs: Math.round(process.uptime() * 1000) })
    }
    return info
  }

  /** The app's port (./listen.js). */
  async function bindPort () {
    state.port = runtime.port = await bindAppPort({ config, mode, listenMode, inherited, port: state.port, supervisor, parts, log })
  }

  /** The app's port, then the probes server. */
  async function listenAll () {
    await bindPort()
    if (config.probes) {
      // http is loaded only when probes are on: the primary stays small otherwise.
      const dashboard = config.probes.dashboard
        ? require('../dashboard').createDashboard({ probes: config.probes, intervalMs: config.health.heartbeatMs, stats, handle, reload: handle.reload })
        : null
      parts.dashboard = dashboard
      const probesOptions = inherited.probes !== null ? Object.assign({}, config.probes, { fd: inherited.probes }) : config.probes
      parts.probes = await require('./probes').startProbes(probesOptions, { stats, metrics, isLive, isReady, degradation: sessions.degradation, dashboard })
      state.probesPort = parts.probes.port
    }
  }

  /**
   * Reloads run one after another. Requests made while one is already
   * waiting share it: a burst of signals gives at most one more reload.
   */
  function createReloadQueue () {
    let chain = Promise.resolve()
    let queued = null
    function request () {
      if (queued) return queued
      const run = chain.then(() => {
        queued = null
        if (state.shuttingDown) return { ok: false, rolledBack: false, reason: 'shutting down', replaced: 0, durationMs: 0, generation: supervisor.generation }
        handle.emit('reload:start', { generation: supervisor.codeGeneration + 1 })
        return reloader.reload()
      }).then((result) => {
        state.reloads++
        metrics.onReload(result)
        handle.emit('reload:done', result)
        return result
      })
      queued = run
      chain = run.catch(() => {})
      return run
    }
    return { request }
  }

  function onCrashLoop (info) {
    handle.emit('crashloop', info)
    exitIfNothingServes()
  }

  /** The app cannot load (syntax error, missing module, wrong export): retrying would not help. */
  function onBootFatal (message) {
    log.error(`cannot start: ${message}`)
    shutDownAndExit()
  }

  /** With no worker left and none coming, the service is down: say so and exit 1. */
  function exitIfNothingServes () {
    if (state.shuttingDown || !supervisor.isEmpty()) return
    log.error(`no worker left and none will be started (crash loop); exiting with code 1. Last failure: ${supervisor.lastFailure}`)
    shutDownAndExit()
  }

  /** Drain what is left, then exit 1 (the log's last line says code=1 too). */
  function shutDownAndExit () {
    shutdown(1).then((result) => setImmediate(() => process.exit(result.code)))
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
   * @param {number} [exitCode] the code the caller will exit with (0 by default)
   * @returns {Promise<{ code: number, forced: boolean }>}
   */
  function shutdown (exitCode, reason) {
    if (shutdownPromise) return shutdownPromise
    reason = reason || 'shutdown'
    state.shuttingDown = true
    upgrader.abort()
    supervisor.stop()
    log.info(reason === 'upgrade' ? 'draining after the upgrade' : 'shutting down', { workers: supervisor.liveRecords().length })
    handle.emit('shutdown')
    shutdownPromise = (async () => {
      const timeoutMs = config.shutdown.timeoutMs
      const closing = parts.dispatcher ? parts.dispatcher.close() : parts.balancer ? parts.balancer.close() : Promise.resolve()
      // The new primary answers on the shared probes socket from now on.
      if (reason === 'upgrade' && parts.probes) {
        const probes = parts.probes
        parts.probes = null
        await probes.close()
      }
      const retiring = supervisor.liveRecords()
      // After an upgrade, WebSockets close as on a reload (1012): the service goes on.
      await Promise.all(retiring.map((record) => supervisor.retire(record, reason, timeoutMs)))
      await closing
      const forced = retiring.some((record) => record.forced || record.drainTimedOut)
      if (parts.health) parts.health.stop()
      if (parts.probes) await parts.probes.close()
      await closeServices()
      await busRuntime.close()
      const code = forced || exitCode === 1 ? 1 : 0
      log.info(forced ? 'shutdown forced: some workers were killed at the deadline' : 'shutdown complete', { code })
      return { code, forced }
    })()
    return shutdownPromise
  }

  function stats () {
    return buildStats({ supervisor, dispatcher: parts.dispatcher, balancer: parts.balancer, health: parts.health, state, ready: state.readySettled && isReady(), live: isLive(), bus: busRuntime.status(), sessions: services.get('session').stats(), singletons: services.get('singleton'), dashboard: parts.dashboard ? parts.dashboard.streams : undefined })
  }

  /** The primary's own counters for /metrics: its held connections and the dashboard's streams. */
  function primaryStatus () {
    return { connections: parts.dispatcher ? parts.dispatcher.status() : null, dashboard: parts.dashboard ? parts.dashboard.streams : null }
  }
}

module.exports = { startPrimary }
