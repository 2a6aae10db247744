'use strict'

/**
 * session() options: validation, the secret rules and the security defaults
 * (httpOnly, sameSite 'lax', secure in production, saveUninitialized false,
 * resave false). Everything the user sets explicitly wins over a default.
 */

const cluster = require('cluster')
const crypto = require('crypto')
const { parseRedisTarget } = require('../redis/target')
const { ClusterizeOptionError, MAX_TIMER_MS } = require('../errors')
const { createChecks } = require('../check-options')

const STORES = ['auto', 'redis', 'cluster', 'memory']
const MIN_PRODUCTION_SECRET = 32

/** express-session's own options, passed through untouched after defaults. */
const EXPRESS_SESSION_KEYS = ['cookie', 'genid', 'name', 'key', 'proxy', 'resave', 'rolling', 'saveUninitialized', 'secret', 'unset']
/** Ours. */
const OWN_KEYS = ['store', 'redis', 'prefix', 'ttl', 'timeoutMs', 'maxSessions', 'maxTotalBytes', 'maxSessionBytes', 'retryAfter']
const ACCEPTED = EXPRESS_SESSION_KEYS.concat(OWN_KEYS)

let singleProcessSecret = null

function fail (option, message) {
  return new ClusterizeOptionError(`session: option "${option}" ${message}`, option)
}

/**
 * Is this an express-session Store instance (or something shaped like one)?
 * @param {*} value
 * @returns {boolean}
 */
function isStore (value) {
  return value !== null && typeof value === 'object' &&
    typeof value.get === 'function' && typeof value.set === 'function' &&
    typeof value.destroy === 'function' && typeof value.on === 'function'
}

/**
 * How many workers the runtime says are running (env CLUSTERIZE_WORKERS).
 * 0 means single process. Unknown (a cluster worker started by something else) is null.
 * @param {NodeJS.ProcessEnv} env
 * @returns {number|null}
 */
function workerCount (env) {
  const raw = env.CLUSTERIZE_WORKERS
  if (raw !== undefined && raw !== '') {
    const n = Number(raw)
    if (Number.isInteger(n) && n >= 0) return n
  }
  return cluster.isWorker ? null : 0
}

const checks = createChecks('session')

function checkPositiveInt (options, key) {
  if (options[key] !== undefined) checks.integer(key, options[key], 1)
}

/**
 * The signing secret(s): the `secret` option, else SESSION_SECRET, else (not in
 * production) the runtime's shared dev secret CLUSTERIZE_DEV_SECRET, else in a
 * single process a random one. Workers must share a secret, so several
 * workers without one is an error.
 */
function resolveSecret (options, env, production) {
  let secret = options.secret
  let source = 'option "secret"'
  if (secret === undefined || secret === null || secret === '') {
    secret = env.SESSION_SECRET || undefined
    source = 'SESSION_SECRET'
  }
  if (secret !== undefined) {
    const list = Array.isArray(secret) ? secret : [secret]
    if (list.length === 0 || list.some((s) => typeof s !== 'string' || s === '')) {
      throw fail('secret', 'must be a non-empty string or a non-empty array of strings (the first signs, the others still verify)')
    }
    if (production) {
      const weak = list.find((s) => s.length < MIN_PRODUCTION_SECRET)
      if (weak !== undefined) {
        throw fail('secret', `(${source}) is ${weak.length} characters: in production (NODE_ENV=production) every session secret must be at least ${MIN_PRODUCTION_SECRET} characters. Generate one with: node -e "console.log(require('crypto').randomBytes(32).toString('hex'))"`)
      }
    }
    return secret
  }
  if (production) {
    throw fail('secret', `is required in production (NODE_ENV=production): pass session({ secret }) or set SESSION_SECRET to a random string of at least ${MIN_PRODUCTION_SECRET} characters`)
  }
  if (env.CLUSTERIZE_DEV_SECRET) return env.CLUSTERIZE_DEV_SECRET
  if (workerCount(env) === 0) {
    // One process: a random secret is consistent everywhere it is used; sessions end with the process.
    if (singleProcessSecret === null) singleProcessSecret = crypto.randomBytes(32).toString('hex')
    return singleProcessSecret
  }
  throw fail('secret', 'is required when several workers run: every worker must sign cookies with the same secret, or a cookie set by one worker is rejected by the next. Pass session({ secret }) or set SESSION_SECRET')
}

function cookieDefaults (production) {
  return { httpOnly: true, sameSite: 'lax', secure: production }
}

function resolveCookie (cookie, production) {
  const defaults = cookieDefaults(production)
  if (cookie === undefined || cookie === null) return defaults
  if (typeof cookie === 'function') {
    return function cookieWithDefaults (req) {
      return Object.assign({}, defaults, cookie(req))
    }
  }
  if (typeof cookie !== 'object' || Array.isArray(cookie)) throw fail('cookie', 'must be an object (or a function of req returning one)')
  return Object.assign({}, defaults, cookie)
}

/**
 * Validate session() options and apply the security defaults.
 *
 * @param {object} [options]
 * @param {NodeJS.ProcessEnv} [env]
 * @returns {{ store: string|object, redis: *, prefix?: string, ttl?: number, timeoutMs: number,
 *   maxSessions?: number, maxTotalBytes?: number, maxSessionBytes?: number, retryAfter: number, workers: number|null, production: boolean, expressSession: object }}
 */
function resolveSessionOptions (options, env) {
  env = env || process.env
  if (options === undefined || options === null) options = {}
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new ClusterizeOptionError('session: options must be an object', 'options')
  }
  for (const key of Object.keys(options)) {
    if (!ACCEPTED.includes(key)) {
      throw new ClusterizeOptionError(`session: unknown option "${key}" (accepted: ${ACCEPTED.join(', ')})`, key)
    }
  }
  const production = env.NODE_ENV === 'production'

  const store = options.store === undefined ? 'auto' : options.store
  if (!STORES.includes(store) && !isStore(store)) {
    throw fail('store', `must be one of ${STORES.map((s) => `'${s}'`).join(', ')} or an express-session Store instance`)
  }
  const redis = options.redis
  // Checked here so a bad URL or Sentinel/Cluster configuration fails at startup, naming the option.
  if (redis !== undefined && redis !== null && redis !== false) parseRedisTarget(redis, 'redis', 'session')
  if (options.prefix !== undefined && typeof options.prefix !== 'string') throw fail('prefix', 'must be a string')
  for (const key of ['timeoutMs', 'maxSessions', 'maxTotalBytes', 'maxSessionBytes']) checkPositiveInt(options, key)
  // Durations in seconds (a Redis expiry, a Retry-After): bounded like the
  // millisecond options, at 2^31-1, so a typo in units fails here.
  for (const key of ['ttl', 'retryAfter']) {
    const value = options[key]
    if (value !== undefined && (!Number.isInteger(value) || value < 1 || value > MAX_TIMER_MS)) {
      throw checks.fail(key, `an integer from 1 to ${MAX_TIMER_MS} (seconds)`, value)
    }
  }
  if (options.maxSessionBytes !== undefined && options.maxTotalBytes !== undefined && options.maxSessionBytes > options.maxTotalBytes) {
    throw fail('maxSessionBytes', `(${options.maxSessionBytes}) is over maxTotalBytes (${options.maxTotalBytes}): a session that size could never be stored`)
  }
  if (options.timeoutMs !== undefined) checks.timerMs('timeoutMs', options.timeoutMs, 1)

  const expressSession = {}
  for (const key of EXPRESS_SESSION_KEYS) {
    if (options[key] !== undefined) expressSession[key] = options[key]
  }
  expressSession.secret = resolveSecret(options, env, production)
  expressSession.cookie = resolveCookie(options.cookie, production)
  if (expressSession.resave === undefined) expressSession.resave = false
  if (expressSession.saveUninitialized === undefined) expressSession.saveUninitialized = false

  return {
    store,
    redis,
    prefix: options.prefix,
    ttl: options.ttl,
    timeoutMs: options.timeoutMs || 2000,
    maxSessions: options.maxSessions,
    maxTotalBytes: options.maxTotalBytes,
    maxSessionBytes: options.maxSessionBytes,
    retryAfter: options.retryAfter || 1,
    workers: workerCount(env),
    production,
    expressSession
  }
}

module.exports = { resolveSessionOptions, isStore, workerCount, STORES, MIN_PRODUCTION_SECRET }
