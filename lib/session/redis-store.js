'use strict'

/**
 * The Redis session store: an express-session Store of our own on ioredis.
 *
 * It used to subclass connect-redis 8 and override all seven Store methods,
 * its private _getTTL and its client wrapper. Through its public API
 * connect-redis cannot give what the Store contract here checks: it expires
 * keys in whole seconds (a 300 ms session is counted by length() for a full
 * second), its touch only moves the key's expiry (the stored cookie falls
 * behind), its all() returns records express-session cannot read, and on a
 * Redis Cluster it scans one node and sends MGET/DEL across slots (CROSSSLOT).
 * What would be left of it is a GET and a DEL.
 *
 * Layers: lib/redis/availability.js's gate (503 at once while Redis is down, a wait for
 * the first connection), redis-touch.js (touch in one round trip),
 * redis-keys.js (the prefix's keys on one node or every Cluster master).
 *
 * The client we build fails fast while disconnected (no offline queue, one
 * retry per command, a command timeout), keeps reconnecting with a short
 * capped backoff, and writes the commands of one event-loop turn together
 * (lib/redis/turn-pipeline.js). A client the user passes in is used as is.
 */

const { Store } = require('express-session')
const debug = require('debug')('clusterize:session')
const { toUnavailable, SessionStoreUnavailableError } = require('./unavailable')
const { callOnce, CallbackOutcome } = require('./callback')
const { promised } = require('./promised')
const { inflatableOrNull, whyNotInflatable, Unreadable } = require('./inflatable')
const { RedisGate } = require('../redis/availability')
const { touchSession, cookieExpired } = require('./redis-touch')
const { sessionKeys } = require('./redis-keys')
const { parseRedisTarget, isClusterTarget, topologyOf } = require('../redis/target')
const { connectRedis } = require('../redis/connect')
const { TurnPipeline, DirectCommands } = require('../redis/turn-pipeline')

const DEFAULT_PREFIX = 'sess:'
const DEFAULT_TTL_SECONDS = 86400
const DEFAULT_TIMEOUT_MS = 2000

class ClusterizeRedisStore extends Store {
  /**
   * @param {object} options
   * @param {*} options.redis a Redis target: URL (redis://, redis+sentinel://, redis+cluster://), ioredis
   *   options, a list of cluster nodes, or an ioredis Redis or Cluster client (see lib/redis/target.js)
   * @param {string} [options.option='redis'] where `redis` came from, named in a startup error ('REDIS_URL')
   * @param {string} [options.prefix='sess:']
   * @param {number} [options.ttl=86400] seconds, when the cookie has no expiry
   * @param {number} [options.timeoutMs=2000] command timeout for a client we build
   */
  constructor (options) {
    super()
    const timeoutMs = options.timeoutMs || DEFAULT_TIMEOUT_MS
    const target = parseRedisTarget(options.redis, options.option || 'redis', 'session')
    this.ownsClient = target.client === undefined
    const cluster = isClusterTarget(target)
    // ioredis's auto-pipelining only where our own turn pipeline cannot go (see lib/redis/turn-pipeline.js).
    this.redis = this.ownsClient ? connectRedis(target, { timeoutMs, autoPipelining: cluster }) : target.client
    /** Where this store's commands go: { send(name, args) } */
    this.commands = this.ownsClient && !cluster ? new TurnPipeline(this.redis) : new DirectCommands(this.redis)
    this.topology = topologyOf(target)
    this.prefix = options.prefix === undefined ? DEFAULT_PREFIX : options.prefix
    this.ttlMs = (options.ttl || DEFAULT_TTL_SECONDS) * 1000
    this.keys = sessionKeys(this.redis, cluster)
    this.availabilityState = new RedisGate(this.redis, { timeoutMs, unavailableError: redisUnavailable })
    // session object -> { sid, deadline } of this store's last save of it (see redis-touch.js).
    this.justSet = new WeakMap()
    /** How this store's callbacks are running right now (lib/session/hold-response.js reads it). */
    this.outcome = new CallbackOutcome()
  }

  /** @returns {{ available: boolean, lastError: string|null }} */
  availability () {
    return this.availabilityState.state()
  }

  /**
   * Call back with null when Redis can take commands, or with a 503
   * SessionStoreUnavailableError (the session middleware's gate).
   * @param {(err: Error|null) => void} cb
   */
  checkAvailable (cb) {
    this.availabilityState.check(cb)
  }

  /**
   * Run one operation: after the first connection, answering `cb` exactly
   * once, asynchronously, with Redis errors as 503s; without `cb`, a promise.
   * @param {string} op
   * @param {Array} args the operation's arguments, for the promise form
   * @param {Function|undefined} cb
   * @param {() => Promise<*>} work
   */
  run (op, args, cb, work) {
    if (typeof cb !== 'function') return promised(this, op, args)
    const answer = callOnce(cb, op, this.outcome)
    const fail = (err) => answer(toUnavailable(err, 'redis'))
    this.availabilityState.afterFirstConnection(fail, function runOperation () {
      // The answer runs outside this chain (callOnce rethrows an app exception on its own).
      new Promise((resolve) => resolve(work())).then((value) => answer(null, value), fail)
    })
  }

  /** A session express-session can read, or null (an unreadable record is removed, with one log line). */
  get (sid, cb) {
    return this.run('get', [sid], cb, async () => {
      const raw = await this.commands.send('get', [this.prefix + sid])
      if (raw === null) return null
      const sess = inflatableOrNull(this.parse(raw), 'redis', (removed) => this.destroy(sid, removed))
      return sess !== null && cookieExpired(sess) ? null : sess
    })
  }

  /** Store the session until its cookie expires, to the millisecond; an expired one is removed. */
  set (sid, sess, cb) {
    return this.run('set', [sid, sess], cb, async () => {
      const key = this.prefix + sid
      const ms = this.msLeft(sess)
      if (!(ms > 0)) return void await this.commands.send('del', [key])
      const deadline = Date.now() + ms
      await this.commands.send('set', [key, JSON.stringify(sess), 'PX', Math.ceil(ms)])
      if (sess !== null && typeof sess === 'object') this.justSet.set(sess, { sid, deadline })
    })
  }

  /** Extend the expiry and refresh the stored cookie, leaving the data as stored (see redis-touch.js). */
  touch (sid, sess, cb) {
    return this.run('touch', [sid, sess], cb, () => touchSession(this, sid, sess))
  }

  destroy (sid, cb) {
    return this.run('destroy', [sid], cb, async () => {
      await this.commands.send('del', [this.prefix + sid])
    })
  }

  /** Removes every session under this store's prefix (on every master of a Cluster). */
  clear (cb) {
    return this.run('clear', [], cb, async () => {
      await this.keys.remove(await this.keys.list(this.prefix))
    })
  }

  /** How many sessions are stored under this prefix (Redis has dropped the expired ones). */
  length (cb) {
    return this.run('length', [], cb, async () => (await this.keys.list(this.prefix)).length)
  }

  /** The ids of the stored sessions (connect-redis's ids()). */
  ids (cb) {
    return this.run('ids', [], cb, async () => (await this.keys.list(this.prefix)).map((key) => key.slice(this.prefix.length)))
  }

  /** Every session express-session can read, with its `id` (an unreadable record is skipped, not an error). */
  all (cb) {
    return this.run('all', [], cb, async () => {
      const keys = await this.keys.list(this.prefix)
      const values = await this.keys.read(keys)
      const out = []
      values.forEach((raw, i) => {
        const sess = raw === null ? null : this.parse(raw)
        if (whyNotInflatable(sess) !== null || cookieExpired(sess)) return
        sess.id = keys[i].slice(this.prefix.length)
        out.push(sess)
      })
      return out
    })
  }

  /**
   * A stored record as JSON; one that is not JSON reads as Unreadable (see inflatable.js).
   * @param {string} text
   */
  parse (text) {
    try {
      return JSON.parse(text)
    } catch (err) {
      return new Unreadable(err.message)
    }
  }

  /**
   * Milliseconds the session has left: to its cookie's expiry, or the ttl for a browser-session cookie.
   * @param {object} sess
   * @returns {number} NaN for an expiry that is not a date (the session is then removed)
   */
  msLeft (sess) {
    const expires = sess && sess.cookie && sess.cookie.expires
    if (expires) return Number(new Date(expires)) - Date.now()
    return this.ttlMs
  }

  /**
   * Stop using the client: quit it if we built it, else just stop listening.
   * @returns {Promise<void>}
   */
  async close () {
    this.availabilityState.stop()
    if (!this.ownsClient) return
    // Errors while our own client shuts down are expected: without a listener
    // ioredis would print them to the console.
    this.redis.on('error', function closingError (err) { debug('while closing: %s', err.message) })
    if (this.redis.status === 'ready') {
      await this.redis.quit().catch(() => this.redis.disconnect())
    } else {
      this.redis.disconnect()
    }
  }
}

/**
 * The Redis target from the session options or REDIS_URL.
 * @param {object} options
 * @param {NodeJS.ProcessEnv} env
 * @returns {string|object|undefined}
 */
function redisTarget (options, env) {
  if (options.redis !== undefined && options.redis !== null && options.redis !== false) return options.redis
  return env.REDIS_URL || undefined
}

/** A command refused while Redis is unreachable: a 503 (the session middleware's gate). */
function redisUnavailable (reason) {
  return new SessionStoreUnavailableError(`session store unavailable: redis: ${reason}`, { store: 'redis' })
}

module.exports = { ClusterizeRedisStore, redisTarget, DEFAULT_PREFIX }
