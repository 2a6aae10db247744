'use strict'

/**
 * Turn the `store` option into an express-session Store, with a name, an
 * availability probe and an optional gate the middleware runs before
 * express-session (so a disconnected store answers 503 instead of leaving
 * req.session undefined).
 */

const cluster = require('cluster')
const { MemoryStore } = require('express-session')
const debug = require('debug')('clusterize:session')
const { ClusterStore } = require('./cluster-store')
const { ClusterizeRedisStore, redisTarget } = require('./redis-store')
const { SessionStoreUnavailableError } = require('./unavailable')
const { ClusterizeOptionError } = require('../errors')

/**
 * @param {ReturnType<typeof import('./options').resolveSessionOptions>} opts
 * @param {NodeJS.ProcessEnv} env
 * @returns {{ kind: string, store: object, gate: ((cb: Function) => void)|null,
 *   availability: () => { available: boolean, lastError: string|null }, close: () => Promise<void> }}
 */
function createStore (opts, env) {
  let kind = opts.store
  if (typeof kind !== 'string') return wrapUserStore(kind)
  const target = redisTarget(opts, env)
  if (kind === 'auto') kind = target !== undefined ? 'redis' : 'cluster'
  debug('session store: %s', kind)

  if (kind === 'memory') {
    if (opts.workers === null || opts.workers > 1) {
      const count = opts.workers === null ? 'several (this is a cluster worker)' : String(opts.workers)
      throw new ClusterizeOptionError(
        `session: store 'memory' keeps sessions inside one process, but ${count} workers are running: ` +
        'a user who logs in on one worker would be a stranger on the next. Use store \'cluster\' ' +
        '(sessions held by the primary, the default) or \'redis\'.', 'store')
    }
    const store = new MemoryStore()
    return { kind, store, gate: null, availability: alwaysAvailable, close: async () => {} }
  }

  if (kind === 'redis') {
    if (target === undefined) {
      throw new ClusterizeOptionError("session: store 'redis' needs the redis option (a URL, ioredis options, cluster nodes or a client) or REDIS_URL", 'redis')
    }
    // REDIS_URL is checked as strictly as the option, and named in the error.
    const option = opts.redis === undefined || opts.redis === null || opts.redis === false ? 'REDIS_URL' : 'redis'
    const store = new ClusterizeRedisStore({ redis: target, option, prefix: opts.prefix, ttl: opts.ttl, timeoutMs: opts.timeoutMs })
    return {
      kind,
      store,
      gate: (cb) => store.checkAvailable(cb),
      availability: () => store.availability(),
      close: () => store.close()
    }
  }

  if (cluster.isWorker && env.CLUSTERIZE_WORKER_ID === undefined) {
    throw new ClusterizeOptionError(
      "session: store 'cluster' keeps sessions in the clusterize primary, but this cluster worker was not started by " +
      "clusterize() (PM2 cluster mode or your own cluster.fork?). Start the app with clusterize(), or use store 'redis'.", 'store')
  }
  const store = new ClusterStore({
    timeoutMs: opts.timeoutMs,
    ttl: opts.ttl,
    prefix: opts.prefix,
    maxSessions: opts.maxSessions,
    maxTotalBytes: opts.maxTotalBytes,
    maxSessionBytes: opts.maxSessionBytes
  })
  return { kind: 'cluster', store, gate: null, availability: () => store.availability(), close: async () => {} }
}

function alwaysAvailable () {
  return { available: true, lastError: null }
}

/** A store the user built: follow its 'disconnect'/'connect' events. */
function wrapUserStore (store) {
  const kind = (store.constructor && store.constructor.name) || 'custom'
  let connected = true
  let lastError = null
  store.on('disconnect', function onDisconnect () {
    connected = false
    lastError = lastError || 'store emitted "disconnect"'
  })
  store.on('connect', function onConnect () {
    connected = true
    lastError = null
  })
  return {
    kind,
    store,
    gate: function userStoreGate (cb) {
      if (connected) return cb(null)
      cb(new SessionStoreUnavailableError(`session store unavailable: ${kind}: ${lastError}`, { store: kind }))
    },
    availability: () => ({ available: connected, lastError: connected ? null : lastError }),
    close: async () => {}
  }
}

module.exports = { createStore }
