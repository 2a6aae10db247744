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
const path = require('path')

/** Requests inspected for a MemoryStore before giving up (apps without sessions pay nothing after). */
const SESSION_CHECKS = 1000

/**
 * Record listen() calls on any server while `fn` builds the app.
 *
 * A listen on clusterize's own port (`app.listen(process.env.PORT)`, the
 * textbook app.js) fails with EADDRINUSE in a worker; with no 'error'
 * listener that would crash every worker right after it became ready, in a
 * loop. The app is served on that port anyway, so that one failure is
 * reported to `onPortClash` and otherwise ignored.
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
    if (ownPort !== 0 && portOf(arguments[0]) === ownPort) survivePortClash(this, ownPort, own.onPortClash)
    return original.apply(this, arguments)
  }
  try {
    return { value: await fn(), listened }
  } finally {
    net.Server.prototype.listen = original
  }
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

/**
 * Warn once if requests go through express-session with its default
 * MemoryStore while several workers serve.
 * @param {import('http').Server} server
 * @param {object} log
 * @param {number} workers
 */
function warnOnMemoryStore (server, log, workers) {
  if (!(workers > 1)) return
  let checks = 0
  function onRequest (req, res) {
    res.once('finish', function checkSessionStore () {
      if (checks === -1) return
      const store = req.sessionStore
      if (store && store.constructor && store.constructor.name === 'MemoryStore' && typeof store.sessions === 'object') {
        checks = -1
        server.removeListener('request', onRequest)
        log.warn(`express-session's default MemoryStore keeps sessions in each worker: with ${workers} workers a user logged in on one is a stranger on the next. ` +
          "Use clusterize's session() (require('clusterize-express').session({ secret })), give express-session a shared store, " +
          "or start with `clusterize app.js --sessions cluster` (option defaultSessionStore: 'cluster') to make the default store the cluster store", { pid: process.pid })
      } else if (++checks >= SESSION_CHECKS) {
        server.removeListener('request', onRequest)
      }
    })
  }
  server.on('request', onRequest)
}

/**
 * Make express-session's default store (`new MemoryStore()` when no store is
 * given) the cluster store, for the copy of express-session the app will
 * load. Must run before the app first requires express-session.
 * @param {string} appDir where the app's own require() starts looking
 * @returns {boolean} whether an express-session was found and patched
 */
function useClusterStoreByDefault (appDir) {
  let memoryPath
  try {
    memoryPath = require.resolve('express-session/session/memory', { paths: [appDir, process.cwd()] })
  } catch {
    return false
  }
  const index = require.resolve(path.join(path.dirname(memoryPath), '..'))
  if (require.cache[index]) return false // already loaded with its own MemoryStore
  // express-session reads `require('./session/memory')` once, when it loads.
  function ClusterDefaultStore (options) {
    const { ClusterStore } = require('../session/cluster-store')
    return new ClusterStore(options)
  }
  const Module = require('module')
  const entry = new Module(memoryPath, module)
  entry.filename = memoryPath
  entry.loaded = true
  entry.exports = ClusterDefaultStore
  require.cache[memoryPath] = entry
  return true
}

module.exports = { watchListenCalls, listenWarning, portClashNote, warnOnMemoryStore, useClusterStoreByDefault }
