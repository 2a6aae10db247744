'use strict'

/**
 * Drop-in pitfalls of running an existing Express app on several workers,
 * noticed (once per worker, through the logger) or fixed without a code
 * change:
 * - the app calls app.listen() itself while clusterize builds it;
 * - the app keeps express-session's default MemoryStore, so sessions live
 *   in one worker each and logins break silently;
 * - `defaultSessionStore: 'cluster'` (CLI: --sessions cluster) makes that
 *   default store the cluster store instead, 'redis' (--sessions redis) the
 *   Redis store.
 */

const net = require('net')
const path = require('path')
const { registerStatus } = require('../session/status')
const { standIn } = require('./app-server')

/** Requests inspected for a MemoryStore before giving up (apps without sessions pay nothing after). */
const SESSION_CHECKS = 1000

/**
 * Record listen() calls on any server while `fn` builds the app.
 *
 * A listen on clusterize's own port (`app.listen(process.env.PORT)`, the
 * textbook app.js) cannot bind in a worker: clusterize serves that port. The
 * app's server becomes a stand-in for the one clusterize serves instead
 * (./app-server.js): its close() drains the real server, so the app's own
 * graceful stop works. `onOwnPort` is told of it.
 * @template T
 * @param {() => Promise<T>} fn
 * @param {{ port?: number, host?: string, onOwnPort?: (port: number) => void, drain?: () => Promise<void> }} [own]
 *   clusterize's port, and what drains it when the app closes its stand-in
 * @returns {Promise<{ value: T, listened: boolean }>} `listened`: the app listened on another port
 */
async function watchListenCalls (fn, own) {
  const original = net.Server.prototype.listen
  const ownPort = own && own.port ? own.port : 0
  let listened = false
  net.Server.prototype.listen = function listenDuringBuild () {
    if (ownPort !== 0 && portOf(arguments[0]) === ownPort && own.drain) {
      if (own.onOwnPort) own.onOwnPort(ownPort)
      return standIn(this, arguments, { port: ownPort, host: own.host, drain: own.drain })
    }
    listened = true
    return original.apply(this, arguments)
  }
  try {
    return { value: await fn(), listened }
  } finally {
    net.Server.prototype.listen = original
  }
}

/** The port a listen() call asks for: `listen(port)`, `listen('3000')`, `listen({ port })`. */
function portOf (first) {
  const port = first !== null && typeof first === 'object' ? first.port : first
  if (typeof port === 'number') return port
  return typeof port === 'string' && /^\d+$/.test(port) ? Number(port) : undefined
}

/** The log line when the app's own listen() was on clusterize's port. */
function ownPortNote (port) {
  return `the app's own listen() on port ${port} binds nothing: clusterize serves the app on that port, ` +
    "and the app's server stands in for it (its close() drains the workers' requests, then calls back)"
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
    "or start with `clusterize app.js --sessions cluster` (option defaultSessionStore: 'cluster') to make the default store the cluster store " +
    '(`--sessions redis` with --redis URL: the Redis store, for several hosts and primary restarts)', { pid: process.pid })
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
 * given) the cluster store or the Redis store, for the copy of
 * express-session the app will load. Must run before the app first requires
 * express-session.
 * @param {string} appDir where the app's own require() starts looking
 * @param {'cluster'|'redis'} [kind='cluster']
 * @param {*} [redis] the Redis target for 'redis' (config.sessionRedis)
 * @returns {{ replaced: boolean, loadedAt: string|null }} `loadedAt`: the
 *   express-session folder that was already loaded, so could not be changed
 */
function useStoreByDefault (appDir, kind, redis) {
  const memoryPath = resolveMemoryStore([appDir, process.cwd()])
  if (memoryPath === null) return { replaced: false, loadedAt: null }
  const index = require.resolve(path.join(path.dirname(memoryPath), '..'))
  // Already loaded with its own MemoryStore.
  if (require.cache[index]) return { replaced: false, loadedAt: path.dirname(index) }
  // express-session reads `require('./session/memory')` once, when it loads.
  const DefaultStore = kind === 'redis'
    ? function RedisDefaultStore () {
      const { ClusterizeRedisStore } = require('../session/redis-store')
      const store = new ClusterizeRedisStore({ redis, option: typeof redis === 'string' && redis === process.env.REDIS_URL ? 'REDIS_URL' : 'bus.redis' })
      registerStatus('redis', () => store.availability())
      return store
    }
    : function ClusterDefaultStore (options) {
      const { ClusterStore } = require('../session/cluster-store')
      const store = new ClusterStore(options)
      registerStatus('cluster', () => store.availability())
      return store
    }
  DefaultStore[kClusterDefault] = true
  const Module = require('module')
  const entry = new Module(memoryPath, module)
  entry.filename = memoryPath
  entry.loaded = true
  entry.exports = DefaultStore
  require.cache[memoryPath] = entry
  return { replaced: true, loadedAt: null }
}

/** 0.2's name, for the cluster store. */
function useClusterStoreByDefault (appDir) {
  return useStoreByDefault(appDir, 'cluster')
}

/** The warning when defaultSessionStore came too late for the app's express-session. */
function clusterDefaultTooLate (dir, kind) {
  kind = kind || 'cluster'
  return `defaultSessionStore '${kind}' (--sessions ${kind}) cannot replace the default store of express-session at ${dir}: ` +
    'it was loaded before clusterize() ran in this worker, so it keeps a MemoryStore per worker. ' +
    `Call require('express-session') inside createApp, start the app file with the CLI (clusterize app.js --sessions ${kind}), ` +
    "or use clusterize's session()"
}

module.exports = {
  watchListenCalls,
  listenWarning,
  ownPortNote,
  watchMemoryStores,
  warnOnMemoryStore,
  useClusterStoreByDefault,
  useStoreByDefault,
  clusterDefaultTooLate,
  MEMORY_STORE_STATUS
}
