'use strict'

/**
 * Drop-in pitfalls of running an existing Express app on several workers,
 * noticed (once per worker, through the logger) or fixed without a code
 * change:
 * - the app calls app.listen() itself while clusterize builds it;
 * - the app keeps express-session's default MemoryStore, so sessions live
 *   in one worker each and logins break silently;
 * - `defaultSessionStore: 'cluster'` (CLI: --sessions cluster) makes that
 *   default store the cluster store instead.
 */

const net = require('net')
const os = require('os')
const path = require('path')
const { registerStatus } = require('../session/status')

/** Requests inspected for a MemoryStore before giving up (apps without sessions pay nothing after). */
const SESSION_CHECKS = 1000

/**
 * Record listen() calls on any server while `fn` builds the app.
 *
 * A listen on clusterize's own port (`app.listen(process.env.PORT)`, the
 * textbook app.js) fails with EADDRINUSE in a worker; with no 'error'
 * listener that would crash every worker right after it became ready, in a
 * loop. The app is served on that port anyway, so that one failure is
 * reported to `onPortClash` and otherwise ignored. It is not attempted:
 * with 'rr' the primary's acceptor holds the port and the bind fails, but
 * with 'balanced' the primary's socket is bound and not yet listening, so
 * node:cluster's bind in the primary could succeed (SO_REUSEADDR) and take
 * the port from the workers. The server gets the EADDRINUSE every mode
 * would give it, on the next tick, as a failed listen() does.
 * @template T
 * @param {() => Promise<T>} fn
 * @param {{ port?: number, onPortClash?: (port: number) => void }} [own] clusterize's port
 * @returns {Promise<{ value: T, listened: boolean }>}
 */
async function watchListenCalls (fn, own) {
  const original = net.Server.prototype.listen
  const ownPort = own && own.port ? own.port : 0
  let listened = false
  net.Server.prototype.listen = function listenDuringBuild () {
    listened = true
    if (ownPort !== 0 && portOf(arguments[0]) === ownPort) {
      survivePortClash(this, ownPort, own.onPortClash)
      process.nextTick(emitAddressInUse, this, ownPort)
      return this
    }
    return original.apply(this, arguments)
  }
  try {
    return { value: await fn(), listened }
  } finally {
    net.Server.prototype.listen = original
  }
}

/** The error a listen() on a port already in use emits. */
function emitAddressInUse (server, port) {
  const err = new Error(`listen EADDRINUSE: address already in use :${port}`)
  err.code = 'EADDRINUSE'
  err.errno = -os.constants.errno.EADDRINUSE
  err.syscall = 'listen'
  err.port = port
  server.emit('error', err)
}

function survivePortClash (server, port, onPortClash) {
  server.on('error', function onOwnListenError (err) {
    if (err && err.code === 'EADDRINUSE') {
      server.removeListener('error', onOwnListenError)
      if (onPortClash) onPortClash(port)
      return
    }
    // Any other error keeps its usual effect when nobody else listens for it.
    if (server.listenerCount('error') === 1) throw err
  })
}

/** The port a listen() call asks for: `listen(port)`, `listen('3000')`, `listen({ port })`. */
function portOf (first) {
  const port = first !== null && typeof first === 'object' ? first.port : first
  if (typeof port === 'number') return port
  return typeof port === 'string' && /^\d+$/.test(port) ? Number(port) : undefined
}

/** The log line when the app's own listen on clusterize's port failed and was ignored. */
function portClashNote (port) {
  return `the app's own listen() on port ${port} failed (EADDRINUSE) and was ignored: clusterize serves the app on that port`
}

/** The warning for an app that listened by itself. */
function listenWarning (port) {
  return `the app called listen() itself while clusterize was building it: clusterize listens for you (port ${port}). ` +
    'Remove app.listen() and return the app (or an http.Server that is not listening) from createApp / module.exports; ' +
    'otherwise every worker also binds a port of its own'
}

/** How a per-worker MemoryStore shows in the heartbeat, the banner and /stats. */
const MEMORY_STORE_STATUS = "express-session's MemoryStore (one per worker: logins do not carry across workers)"
const kWatched = Symbol.for('clusterize.memoryStoreWatched')
const kClusterDefault = Symbol.for('clusterize.clusterDefaultStore')
// A worker warns about its MemoryStore once, whichever check sees it first.
let memoryStoreReported = false

function reportMemoryStore (log, workers) {
  if (memoryStoreReported) return
  memoryStoreReported = true
  registerStatus(MEMORY_STORE_STATUS, () => ({ available: true, lastError: null }))
  log.warn(`express-session's default MemoryStore keeps sessions in each worker: with ${workers} workers a user logged in on one is a stranger on the next. ` +
    "Use clusterize's session() (require('clusterize-express').session({ secret })), give express-session a shared store, " +
    "or start with `clusterize app.js --sessions cluster` (option defaultSessionStore: 'cluster') to make the default store the cluster store", { pid: process.pid })
}

/**
 * Warn (once) as soon as the app builds an express-session MemoryStore while
 * several workers serve, so the warning and the banner come at startup, not
 * at the first request. MemoryStore's constructor assigns `this.sessions`: a
 * setter on its prototype sees every construction, even when the app loaded
 * express-session before clusterize() ran, and turns it back into an
 * ordinary own property.
 * @param {object} log
 * @param {number} workers
 * @param {string} appDir where the app's own require() starts looking
 */
function watchMemoryStores (log, workers, appDir) {
  if (!(workers > 1)) return
  for (const memoryPath of expressSessionCopies(appDir)) {
    const MemoryStore = require(memoryPath)
    if (typeof MemoryStore !== 'function' || MemoryStore[kClusterDefault]) continue
    const proto = MemoryStore.prototype
    if (proto[kWatched]) continue
    proto[kWatched] = true
    Object.defineProperty(proto, 'sessions', {
      configurable: true,
      get () { return undefined },
      set: function sessionsOfNewMemoryStore (value) {
        Object.defineProperty(this, 'sessions', { value, writable: true, enumerable: true, configurable: true })
        reportMemoryStore(log, workers)
      }
    })
  }
}

/**
 * Warn once if requests go through express-session with its default
 * MemoryStore while several workers serve (for a copy of express-session
 * watchMemoryStores could not reach).
 * @param {import('http').Server} server
 * @param {object} log
 * @param {number} workers
 */
function warnOnMemoryStore (server, log, workers) {
  if (!(workers > 1) || memoryStoreReported) return
  let checks = 0
  function onRequest (req, res) {
    res.once('finish', function checkSessionStore () {
      if (checks === -1) return
      const store = req.sessionStore
      if (store && store.constructor && store.constructor.name === 'MemoryStore' && typeof store.sessions === 'object') {
        checks = -1
        server.removeListener('request', onRequest)
        reportMemoryStore(log, workers)
      } else if (memoryStoreReported || ++checks >= SESSION_CHECKS) {
        checks = -1
        server.removeListener('request', onRequest)
      }
    })
  }
  server.on('request', onRequest)
}

/**
 * The express-session MemoryStore modules the app can reach: from its own
 * folder, the working directory and ours (deduplicated).
 * @param {string} appDir
 * @returns {string[]}
 */
function expressSessionCopies (appDir) {
  const found = new Set()
  for (const dir of [appDir, process.cwd(), __dirname]) {
    const memoryPath = resolveMemoryStore([dir])
    if (memoryPath !== null) found.add(memoryPath)
  }
  return [...found]
}

/** express-session's MemoryStore module as require() finds it from `dirs`, or null. */
function resolveMemoryStore (dirs) {
  try {
    return require.resolve('express-session/session/memory', { paths: dirs })
  } catch {
    return null
  }
}

/**
 * Make express-session's default store (`new MemoryStore()` when no store is
 * given) the cluster store, for the copy of express-session the app will
 * load. Must run before the app first requires express-session.
 * @param {string} appDir where the app's own require() starts looking
 * @returns {{ replaced: boolean, loadedAt: string|null }} `loadedAt`: the
 *   express-session folder that was already loaded, so could not be changed
 */
function useClusterStoreByDefault (appDir) {
  const memoryPath = resolveMemoryStore([appDir, process.cwd()])
  if (memoryPath === null) return { replaced: false, loadedAt: null }
  const index = require.resolve(path.join(path.dirname(memoryPath), '..'))
  // Already loaded with its own MemoryStore.
  if (require.cache[index]) return { replaced: false, loadedAt: path.dirname(index) }
  // express-session reads `require('./session/memory')` once, when it loads.
  function ClusterDefaultStore (options) {
    const { ClusterStore } = require('../session/cluster-store')
    const store = new ClusterStore(options)
    registerStatus('cluster', () => store.availability())
    return store
  }
  ClusterDefaultStore[kClusterDefault] = true
  const Module = require('module')
  const entry = new Module(memoryPath, module)
  entry.filename = memoryPath
  entry.loaded = true
  entry.exports = ClusterDefaultStore
  require.cache[memoryPath] = entry
  return { replaced: true, loadedAt: null }
}

/** The warning when defaultSessionStore 'cluster' came too late for the app's express-session. */
function clusterDefaultTooLate (dir) {
  return `defaultSessionStore 'cluster' (--sessions cluster) cannot replace the default store of express-session at ${dir}: ` +
    'it was loaded before clusterize() ran in this worker, so it keeps a MemoryStore per worker. ' +
    "Call require('express-session') inside createApp, start the app file with the CLI (clusterize app.js --sessions cluster), " +
    "or use clusterize's session()"
}

module.exports = {
  watchListenCalls,
  listenWarning,
  portClashNote,
  watchMemoryStores,
  warnOnMemoryStore,
  useClusterStoreByDefault,
  clusterDefaultTooLate,
  MEMORY_STORE_STATUS
}
