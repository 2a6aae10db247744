'use strict'

/**
 * The runtime inside a worker: build the app, listen (or take connections
 * handed over by the primary), report ready, send heartbeats, drain on request.
 * It talks to the primary only through lib/ipc.js.
 */

const cluster = require('cluster')
const net = require('net')
const path = require('path')
const debug = require('debug')('clusterize:worker')
const ipc = require('../ipc')
const protocol = require('../protocol')
const { prepareServer, drainServer } = require('./serve')
const { savesUnderLeaseSettled } = require('../session/lease-cache')
const pitfalls = require('./pitfalls')
const { warnOnInstanceJobs } = require('./instance-job-pitfall')
const { prepareAppState } = require('./app-state')
const { createHealthSampler } = require('./heartbeat')
const { listenServer } = require('./listen')
const { createBalancedListener } = require('./balanced-listen')
const { warmUpHttp } = require('./warm-up')
const { busRuntime } = require('../bus')
const services = require('../services')
const { sessionStatus } = require('../session/status')
const { setSessionLogger } = require('../session/log')
const { createLogger } = require('../logger')
const { startWorkerMetrics, reportBounded } = require('../state/metrics/worker')

/**
 * How long a draining worker waits for the primary to confirm session saves it answered early:
 * what is left of its drain deadline, at most 2 s, and at least 0.5 s, so that with the metrics'
 * last report (1 s at most) it stays inside the primary's 2 s backstop after the deadline.
 */
const SAVES_SETTLE_MAX_MS = 2000
const SAVES_SETTLE_MIN_MS = 500

/**
 * Start the worker side. Called by clusterize() when cluster.isWorker.
 * @param {Function|string} createApp
 * @param {object} config resolved configuration
 * @returns {{ app, server, id, generation, ready: Promise }}
 */
function startWorker (createApp, config) {
  let id = Number(process.env.CLUSTERIZE_WORKER_ID)
  const generation = Number(process.env.CLUSTERIZE_GENERATION) || 1
  const listenMode = process.env.CLUSTERIZE_LISTEN || 'cluster'
  const port = process.env.CLUSTERIZE_PORT !== undefined ? Number(process.env.CLUSTERIZE_PORT) : config.port
  // A warm spare builds the app but takes no traffic until the primary gives it a slot.
  let spare = process.env.CLUSTERIZE_SPARE === '1'
  let log = createLogger(config.logger, spare ? ' spare' : ` worker ${id}`)
  const channel = new ipc.Channel(process)
  const handle = { app: null, server: null, id, generation, ready: null }
  let tracker = null
  /** 'balanced': our own accepting on the shared socket. */
  let balanced = null
  let sampler = null
  let heartbeatTimer = null
  let metricsReporter = null
  let shuttingDown = false
  /** The app closed its stand-in server (./app-server.js): resolved once this worker has drained. */
  let appClose = null

  busRuntime.configure(config.bus, { logger: log, role: 'worker' })
  busRuntime.attachToPrimary({ channel, id, generation })
  services.attachToPrimary({ channel, maxQueuedBytes: config.bus.maxQueuedBytes, config })
  setSessionLogger(log)

  const route = protocol.createRouter({
    [protocol.KIND.CONN]: function onConnection (_, message, socketHandle) {
      if (socketHandle && handle.server) acceptHandedConnection(handle.server, socketHandle, message.head)
      else if (socketHandle) socketHandle.close()
    },
    [protocol.KIND.DRAIN]: (_, message) => shutdown(message.timeoutMs, message.reason),
    [protocol.KIND.PROMOTE]: (_, message) => promote(message.slot),
    [protocol.KIND.BUS]: (_, message) => busRuntime.onPrimaryMessage(message),
    [protocol.KIND.SERVICE]: (_, message) => services.onPrimaryMessage(message),
    [protocol.KIND.LISTEN]: function onListenHandle (_, message, listenHandle) {
      if (balanced) balanced.onListen(listenHandle)
      else if (listenHandle) listenHandle.close()
    },
    [protocol.KIND.SHARE]: (_, message) => { if (balanced) balanced.onShare(message) },
    [protocol.KIND.SHARE_LISTENING]: () => shareListening(),
    // Answered from the event loop itself: a hung worker cannot (a reload commits only on it).
    [protocol.KIND.ALIVE_ASK]: (_, message) => channel.postNow(protocol.alive(message.n))
  }, (_, message) => debug('ignoring %s from primary', message.kind))
  ipc.listen(process, (message, socketHandle) => route(null, message, socketHandle))

  // Node's cluster makes a worker exit at once when the primary's channel
  // closes (the primary was killed with SIGKILL, say), dropping requests in
  // flight. Finish them instead, for a bounded time, then exit.
  process.prependListener('disconnect', function onPrimaryGone () {
    if (shuttingDown) return
    if (cluster.worker) cluster.worker.exitedAfterDisconnect = true
    log.warn(`the primary is gone: finishing requests in flight (up to ${config.shutdown.timeoutMs} ms), then exiting`, { pid: process.pid })
    shutdown(config.shutdown.timeoutMs, 'primary-gone')
  })

  // The primary decides when workers stop; a signal sent to the whole process
  // group (Ctrl-C, some orchestrators) must not cut requests short.
  for (const signal of config.shutdown.signals) {
    process.on(signal, function onSignal () {
      shutdown(config.shutdown.timeoutMs, signal)
    })
  }

  handle.ready = boot().catch(function onBootError (err) {
    // The primary logs it (once, with the slot and generation).
    debug('failed to boot: %s', err && err.stack)
    channel.postNow(protocol.bootError(err), undefined, () => process.exit(1))
    // If the channel is gone the callback may never come.
    setTimeout(() => process.exit(1), 1000).unref()
    throw err
  })
  // Callers that never await ready must not see an unhandled rejection.
  handle.ready.catch(() => {})
  return handle

  async function boot () {
    const appDir = appDirectory(createApp)
    const workers = Number(process.env.CLUSTERIZE_WORKERS)
    if (config.defaultSessionStore !== 'memory') {
      const { loadedAt } = pitfalls.useStoreByDefault(appDir, config.defaultSessionStore, config.sessionRedis)
      if (loadedAt) log.warn(pitfalls.clusterDefaultTooLate(loadedAt, config.defaultSessionStore), { pid: process.pid })
    }
    // Before the app loads: a MemoryStore it builds under several workers is a silent bug.
    pitfalls.watchMemoryStores(log, workers, appDir)
    const appState = await prepareAppState({ appDir, config, log, workers })
    const built = await prepareServer(createApp, config, {
      port,
      host: config.host,
      onOwnPort: (own) => log.info(pitfalls.ownPortNote(own), { pid: process.pid }),
      // The app closed the server it got from its listen() on our port: drain, then tell it.
      drain: () => closedByApp(),
      // Through the current logger: a promoted spare logs under its new slot.
      log: { warn: (message, meta) => log.warn(message, meta) }
    })
    if (built.listenedByApp) log.warn(pitfalls.listenWarning(port), { pid: process.pid })
    pitfalls.warnOnMemoryStore(built.server, log, workers)
    warnOnInstanceJobs(log, { workers, entry: typeof createApp === 'string' ? createApp : null, env: process.env })
    appState.afterBuild()
    handle.app = built.app
    handle.server = built.server
    tracker = built.tracker
    // The app's registries exist now: report them before READY, so the first scrape after it asks this worker.
    metricsReporter = startWorkerMetrics(config.metrics)
    await reportBounded(metricsReporter)
    if (spare) await warmUpHttp()
    const address = listenMode === 'handoff' || spare ? { port, handoff: listenMode === 'handoff' } : await listen()
    sampler = createHealthSampler(tracker, { intervalMs: config.health.heartbeatMs, onFdExhausted: (err) => log.warn(fdExhaustedMessage(err), { pid: process.pid }) })
    channel.postNow(protocol.ready(address, sessionStatus()))
    sendHeartbeat()
    heartbeatTimer = setInterval(sendHeartbeat, config.health.heartbeatMs)
    heartbeatTimer.unref()
    debug('worker %d ready (generation %d, %s)', id, generation, listenMode)
    return { id, generation, address }
  }

  /**
   * 'none': the primary upgrades and needs the socket node:cluster shares;
   * only the workers hold it. Node has no public accessor for a server's
   * handle: without one the answer comes with none, and the upgrade says so.
   */
  function shareListening () {
    const listening = handle.server && handle.server.listening && handle.server._handle
    const ok = Boolean(listening) && typeof listening.fd === 'number' && listening.fd >= 0
    channel.postNow(protocol.listening(), ok ? listening : undefined)
  }

  async function listen () {
    if (listenMode === 'balanced') {
      balanced = createBalancedListener({ server: handle.server, channel, heartbeatMs: config.health.heartbeatMs, heartbeatTimeoutMs: config.health.heartbeatTimeoutMs, workers: Number(process.env.CLUSTERIZE_WORKERS) || 1 })
      await balanced.start()
      return { port, balanced: true }
    }
    // An inherited socket (upgrade, systemd) with 'none': node:cluster shares the primary's descriptor.
    const fd = process.env.CLUSTERIZE_LISTEN_FD ? Number(process.env.CLUSTERIZE_LISTEN_FD) : undefined
    return listenServer(handle.server, { port, host: config.host, fd, reusePort: listenMode === 'reuseport' })
  }

  /** A spare takes its slot: with 'none'/'reuseport' it starts listening now. */
  async function promote (slot) {
    if (!spare || shuttingDown) return
    spare = false
    id = slot
    handle.id = slot
    process.env.CLUSTERIZE_WORKER_ID = String(slot)
    busRuntime.setWorkerId(slot)
    log = createLogger(config.logger, ` worker ${id}`)
    debug('spare promoted to slot %d', slot)
    if (listenMode !== 'handoff' && handle.server) {
      try {
        await listen()
      } catch (err) {
        log.error(`promoted spare cannot listen: ${err.message}`, { pid: process.pid })
        process.exit(1)
      }
    }
  }

  function sendHeartbeat () {
    if (!sampler) return
    const figures = sampler.sample()
    figures.generation = generation
    channel.post(protocol.heartbeat(figures, sessionStatus()))
  }

  /**
   * The app's own graceful stop (`server.close(cb)` in its signal handler):
   * drain as a shutdown does and resolve once the primary has been told, so
   * that the app's callback (often `process.exit(0)`) runs after the last
   * request in flight was answered.
   */
  function closedByApp () {
    if (appClose === null) {
      appClose = {}
      appClose.done = new Promise((resolve) => { appClose.resolve = resolve })
    }
    shutdown(config.shutdown.timeoutMs, 'app-close')
    return appClose.done
  }

  /** After the drain: the app's close callbacks end the process, as they would without clusterize. */
  function exitAfterDrain (deadline) {
    if (appClose === null) return process.exit(0)
    if (appClose.told) return
    appClose.told = true
    appClose.resolve()
    // As a process whose server closed: it ends when nothing is left to do (the app's own
    // cleanup), or at the deadline. Leaving the cluster is what keeps it alive no more.
    setTimeout(() => process.exit(0), Math.max(1000, deadline - Date.now())).unref()
    setImmediate(function leaveCluster () {
      if (cluster.worker && cluster.worker.isConnected()) cluster.worker.disconnect()
    })
  }

  async function shutdown (timeoutMs, reason) {
    if (shuttingDown) return
    shuttingDown = true
    debug('worker %d draining (%s, %d ms)', id, reason, timeoutMs)
    if (balanced) balanced.stop()
    const deadline = Date.now() + timeoutMs
    const listening = listenMode !== 'handoff' && listenMode !== 'balanced' && !spare
    const timedOut = await drainServer({ server: handle.server, tracker, listening, log }, timeoutMs, reason)
    // Session saves answered under a lease before the primary applied them: let it apply them
    // (and, during an upgrade, pass them on) before this worker says it is done.
    const settleMs = Math.min(SAVES_SETTLE_MAX_MS, Math.max(SAVES_SETTLE_MIN_MS, deadline - Date.now()))
    if (!(await savesUnderLeaseSettled(settleMs))) log.warn('exiting with session saves the primary has not confirmed yet (they were written to its pipe)', { pid: process.pid })
    clearInterval(heartbeatTimer)
    if (sampler) sampler.stop()
    // Counts made since the last report would leave with this process.
    await reportBounded(metricsReporter)
    if (metricsReporter) metricsReporter.stop()
    if (!channel.postNow(protocol.drained(timedOut), undefined, () => exitAfterDrain(deadline))) exitAfterDrain(deadline)
    setTimeout(() => exitAfterDrain(deadline), 1000).unref()
  }
}

function fdExhaustedMessage (err) {
  return `out of file descriptors (${err.code || err.message}): heartbeats carry the last known RSS; ` +
    'idle connections are shed above maxIdleConnections; stats show fdExhausted while it lasts'
}

/** Where the app's own require() starts: its module's folder, else the main script's. */
function appDirectory (createApp) {
  if (typeof createApp === 'string') return path.dirname(path.resolve(createApp))
  return require.main && require.main.filename ? path.dirname(require.main.filename) : process.cwd()
}

/**
 * Wrap a TCP handle handed over by the primary and give it to the server,
 * as net.Server would with one it accepted itself.
 */
function acceptHandedConnection (server, tcpHandle, head) {
  const socket = new net.Socket({ handle: tcpHandle, readable: true, writable: true })
  // Bytes the primary read to route the connection come first.
  if (typeof head === 'string' && head.length > 0) socket.unshift(Buffer.from(head, 'latin1'))
  // net.Server sets TCP_NODELAY on sockets it accepts (http's default); without
  // it a response written in two chunks stalls ~40 ms on Nagle and delayed ACKs.
  socket.setNoDelay(true)
  server.emit('connection', socket)
  socket.resume()
}

module.exports = { startWorker }
