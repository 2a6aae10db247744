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
const { createScaling, checkTarget } = require('./scaling')
const { startAutoscale } = require('./autoscale')
const { workerExecArgv } = require('./worker-flags')
const { workerResourceAttributes, ATTRIBUTES } = require('./trace-resource')
const { createMetrics } = require('./metrics')
const { watchSessionStores } = require('./session-watch')
const { buildStats } = require('./stats')
const { busRuntime } = require('../bus')
const { startServices, closeServices } = require('../services')
const { handleSignals } = require('../signals')
const { readInherited, checkInheritedPort } = require('./inherit')
const { createSocketPasser, inheritedScheduling } = require('./pass-sockets')
const upgrades = require('./upgrade')
const { holdForHandover } = require('./handover-take')
const { createLogger } = require('../logger')
const { startReloadTriggers } = require('./reload-triggers')
const { outputStatus } = require('../safe-write')
const { ClusterizeError } = require('../errors')

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
  const parts = { dispatcher: null, balancer: null, probes: null, health: null, dashboard: null, triggers: null }
  // listenFd: with 'none', workers listen on the inherited socket through node:cluster.
  const runtime = { listenMode, port: state.port, listenFd: listenMode === 'cluster' ? inherited.http : null, route: null, fork: forkWorker }
  const supervisor = new Supervisor(config, log, runtime)
  // The app's own prom-client metrics come from the metrics service (lib/state/metrics), started below.
  const metrics = createMetrics(supervisor, () => busRuntime.status(), primaryStatus, () => services.get('metrics'))
  const reloader = createReloader(config, supervisor, log)
  const sessions = watchSessionStores(supervisor, log, (name, info) => handle.emit(name, info))
  const reloads = createReloadQueue()
  const scaling = createScaling({ supervisor, log, readyTimeoutMs: config.reload.readyTimeoutMs, drainTimeoutMs: config.reload.drainTimeoutMs })
  let autoscale = null
  const passer = createSocketPasser({ listenMode, inherited, parts, state, config, supervisor })
  const upgrader = upgrades.createUpgrader({
    config,
    log,
    emit: (name, info) => handle.emit(name, info),
    sockets: () => passer.passable(),
    services: () => services,
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
  // Replacing a primary: calls to the services whose state it hands over wait for that state (./handover.js).
  if (inherited.source === 'upgrade') holdForHandover(services)
  forwardEvents()

  Object.defineProperty(handle, 'bus', { enumerable: true, get: () => require('../bus').bus })
  handle.ready = start()
  handle.ready.catch(() => {})
  handle.reload = reloads.request
  handle.scale = scale
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
      [protocol.KIND.ALIVE]: (record, message) => supervisor.onAlive(record, message),
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
        await upgrades.awaitGo({ log, services: () => services, serialization: config.bus.serialization, generation: supervisor.generation })
        await listenAll()
        if (parts.balancer !== null) parts.balancer.release()
      }
    } catch (err) {
      // Whoever shuts down after this (the CLI, the app, the breaker) ends a start that failed: code 1.
      state.startFailed = true
      if (replacing) upgrades.reportFailure(err.message)
      throw err
    }
    state.readySettled = true
    if (!state.shuttingDown) parts.triggers = startReloadTriggers(config, { reload: handle.reload, log, appDir: appDirectory(createApp) })
    if (!state.shuttingDown) autoscale = startAutoscale({ config, supervisor, log, resize: (target, why) => reloads.scale(target, why), busy: reloads.busy })
    if (config.banner && config.logger === undefined) {
      log.info(require('../cli/banner').formatBanner(stats(), { host: config.host, probesPort: state.probesPort, probesHost: config.probes && config.probes.host, dashboard: Boolean(config.probes && config.probes.dashboard), redis: config.bus.redis }).trimEnd())
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
      const probesOptions = Object.assign({}, config.probes, { log }, inherited.probes !== null ? { fd: inherited.probes } : null)
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
    /** Reloads and scalings queued or running: each changes the slots the other works on. */
    let running = 0
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
      track(run)
      return run
    }
    /** Change the worker count once the reload or scaling before it is done (./scaling.js). */
    function scale (target, why) {
      const run = chain.then(() => {
        if (state.shuttingDown) return { ok: false, from: supervisor.slots.length, to: target, ready: supervisor.readyRecords().length, reason: 'shutting down', durationMs: 0 }
        handle.emit('scale:start', { from: supervisor.slots.length, to: target, why })
        return scaling.resize(target, why)
      }).then((result) => {
        result.why = why
        handle.emit('scale:done', result)
        return result
      })
      track(run)
      return run
    }
    function track (run) {
      running++
      chain = run.catch(() => {}).finally(() => { running-- })
    }
    return { request, scale, busy: () => running > 0 }
  }

  /**
   * Add or retire workers now (`handle.scale(n)`): resolves once the new ones
   * are ready or the retired ones have drained and exited.
   * @param {number} count
   * @returns {Promise<object>}
   */
  function scale (count) {
    const dynamic = config.dynamicWorkers
    try {
      checkTarget(count, dynamic ? dynamic.min : undefined, dynamic && dynamic.max !== 'auto' ? dynamic.max : undefined)
    } catch (err) {
      return Promise.reject(err)
    }
    if (!state.readySettled) return Promise.reject(new ClusterizeError('scale: the cluster is still starting; call it after handle.ready resolves', 'ERR_CLUSTERIZE_SCALE_NOT_READY'))
    if (autoscale) autoscale.pin(count)
    return reloads.scale(count, 'requested')
  }

  /**
   * The breaker tripped. After a worker has been ready the primary goes on (the supervisor
   * retries at the capped backoff, /ready answers 503); at the first start nothing ever
   * served and nothing will: say so and exit 1.
   */
  function onCrashLoop (info) {
    handle.emit('crashloop', info)
    if (!supervisor.gaveUp || state.shuttingDown) return
    log.error(`no worker was ever ready and none will be started (crash loop at the first start); exiting with code 1. Last failure: ${supervisor.lastFailure}`)
    shutDownAndExit()
  }

  /**
   * cluster.fork(), and a fork whose spawn failed leaves cluster.workers: with EMFILE
   * node:cluster never hears of it again (no 'exit', no 'disconnect'), so it would stay there.
   */
  function forkWorker (env) {
    const worker = cluster.fork(withTraceResource(env))
    worker.once('error', () => {
      if (worker.process.pid === undefined && cluster.workers[worker.id] === worker) delete cluster.workers[worker.id]
    })
    return worker
  }

  /** The app cannot load (syntax error, missing module, wrong export): retrying would not help. */
  function onBootFatal (message) {
    log.error(`cannot start: ${message}`)
    shutDownAndExit()
  }

  /** Drain what is left, then exit 1 (the log's last line says code=1 too). */
  function shutDownAndExit () {
    shutdown(1).then((result) => setImmediate(() => process.exit(result.code)))
  }

  /** The primary is working: only a first start that gave up is not (it is exiting). */
  function isLive () {
    return !supervisor.gaveUp
  }

  /** Some worker serves, the code on disk stays up (breaker closed), and no slot is left empty by a failed fork. */
  function isReady () {
    return !state.shuttingDown && !supervisor.crashLooping && supervisor.forkFailing.size === 0 && supervisor.readyRecords().length > 0
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
    if (parts.triggers) parts.triggers.stop()
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
      if (autoscale) autoscale.stop()
      if (parts.probes) await parts.probes.close()
      await closeServices()
      await busRuntime.close()
      const code = forced || exitCode === 1 || state.startFailed ? 1 : 0
      // A worker that ended itself mid-drain cut what it had in flight: not a clean shutdown either.
      const cut = retiring.filter((record) => record.endedMidDrain()).length
      if (forced) log.info('shutdown forced: some workers were killed at the deadline', { code })
      else if (cut > 0) log.warn(`shutdown done, not clean: ${cut} worker${cut === 1 ? '' : 's'} exited before draining (see above)`, { code })
      else log.info('shutdown complete', { code })
      return { code, forced }
    })()
    return shutdownPromise
  }

  function stats () {
    return buildStats({ scaling: autoscale ? autoscale.status() : { mode: 'fixed', workers: supervisor.slots.length }, supervisor, dispatcher: parts.dispatcher, balancer: parts.balancer, health: parts.health, state, ready: state.readySettled && isReady(), live: isLive(), bus: busRuntime.status(), sessions: services.get('session').stats(), singletons: services.get('singleton'), dashboard: parts.dashboard ? parts.dashboard.streams : undefined, probes: parts.probes ? parts.probes.status() : undefined, bounds: boundsStatus() })
  }

  /** The primary's own counters for /metrics: its held connections and the dashboard's streams. */
  function primaryStatus () {
    return { connections: parts.dispatcher ? parts.dispatcher.status() : null, dashboard: parts.dashboard ? parts.dashboard.streams : null, probes: parts.probes ? parts.probes.status() : null, output: outputStatus(), bounds: boundsStatus() }
  }

  /** What the bounds of the stores this primary holds turned away or evicted since it started. */
  function boundsStatus () {
    const sessions = services.get('session')
    const rateLimit = services.get('rate-limit')
    const recovery = services.get('recovery')
    const recoveryStats = recovery ? recovery.stats() : {}
    return {
      sessionsEvicted: sessions ? sessions.evicted : 0,
      rateLimitKeysRefused: rateLimit && typeof rateLimit.refused === 'function' ? rateLimit.refused() : 0,
      recoverySessionsDropped: recoveryStats.sessionsDropped || 0,
      recoveryUnsentDropped: (recoveryStats.redis && recoveryStats.redis.unsentDropped) || 0
    }
  }
}

/**
 * A worker's fork environment with its slot and generation in OTEL_RESOURCE_ATTRIBUTES
 * (./trace-resource.js): an OpenTelemetry SDK in the worker puts them on every span.
 * @param {Record<string, string>} env the CLUSTERIZE_* variables of one fork
 * @returns {Record<string, string>}
 */
function withTraceResource (env) {
  const slot = env.CLUSTERIZE_SPARE ? -1 : Number(env.CLUSTERIZE_WORKER_ID)
  return Object.assign({}, env, { [ATTRIBUTES]: workerResourceAttributes(process.env[ATTRIBUTES], { slot, generation: Number(env.CLUSTERIZE_GENERATION) }) })
}

/** Where `watch: true` looks: the app module's folder, else the main script's. */
function appDirectory (createApp) {
  if (typeof createApp === 'string') return path.dirname(path.resolve(createApp))
  return require.main && require.main.filename ? path.dirname(require.main.filename) : process.cwd()
}

module.exports = { startPrimary }
