'use strict'

/**
 * Is the Redis behind the session store taking commands? Followed from the
 * client's events, so the session middleware answers 503 at once while Redis
 * is unreachable (instead of every request waiting for a command timeout),
 * and recovers by itself when it returns. Before the first connection a
 * request waits for it, up to timeoutMs: starting is not an outage.
 */

const debug = require('debug')('clusterize:session')
const { SessionStoreUnavailableError } = require('./unavailable')
const { explainRedisError } = require('../redis/explain')

/** Still making its first connection. */
const CONNECTING = ['wait', 'connecting', 'connect']

class RedisAvailability {
  /**
   * @param {import('ioredis').Redis|import('ioredis').Cluster} client
   * @param {number} timeoutMs how long a request waits for the first connection
   */
  constructor (client, timeoutMs) {
    this.client = client
    this.timeoutMs = timeoutMs
    this.lastError = null
    this.everReady = client.status === 'ready'
    this.waiters = []
    this.onReady = () => {
      debug(this.everReady ? 'redis session store reconnected' : 'redis session store connected')
      this.everReady = true
      this.lastError = null
      this.flushWaiters(null)
    }
    this.onError = (err) => {
      this.lastError = explainRedisError(err)
      debug('redis session store error: %s', this.lastError)
      // Retrying will not fix a refused password: answer the waiting requests now.
      if (!this.everReady && /^(WRONGPASS|NOAUTH|NOPERM)/.test(err && err.message)) this.flushWaiters(err)
    }
    this.onEnd = () => {
      this.flushWaiters(new Error(this.lastError || 'connection closed'))
    }
    client.on('ready', this.onReady)
    client.on('error', this.onError)
    client.on('end', this.onEnd)
  }

  /** @returns {{ available: boolean, lastError: string|null }} */
  state () {
    const status = this.client.status
    // Still making its first connection, with no error yet: not an outage (the
    // gate waits for it), so no "unavailable" alarm at every start.
    const firstConnect = !this.everReady && this.lastError === null && CONNECTING.includes(status)
    const available = status === 'ready' || firstConnect
    return { available, lastError: available ? null : (this.lastError || `connection ${status}`) }
  }

  /**
   * Call back with null when Redis can take commands, or with a
   * SessionStoreUnavailableError. Before the first connection it waits up to
   * timeoutMs; after that a disconnected Redis fails at once.
   * @param {(err: Error|null) => void} cb
   */
  check (cb) {
    const status = this.client.status
    if (status === 'ready') return cb(null)
    if (!this.everReady && CONNECTING.includes(status)) {
      if (status === 'wait') this.client.connect().catch(() => {})
      const waiter = { cb, timer: null }
      waiter.timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1)
        cb(this.unavailableError())
      }, this.timeoutMs)
      this.waiters.push(waiter)
      return
    }
    cb(this.unavailableError())
  }

  /**
   * Run `run` once Redis has connected for the first time: a store used
   * directly (plain express-session, or a call right after creation) waits
   * for that as our middleware's gate does, instead of failing at once on
   * the client's disabled offline queue. After the first connection it runs
   * at once, and a disconnected Redis fails fast.
   * @param {(err: Error) => void} fail
   * @param {() => void} run
   */
  afterFirstConnection (fail, run) {
    if (this.everReady || this.client.status === 'ready') return run()
    this.check(function firstConnection (err) {
      if (err) return fail(err)
      run()
    })
  }

  /** @returns {SessionStoreUnavailableError} */
  unavailableError () {
    const reason = this.lastError || `connection ${this.client.status}`
    return new SessionStoreUnavailableError(`session store unavailable: redis: ${reason}`, { store: 'redis' })
  }

  flushWaiters (err) {
    const waiters = this.waiters
    this.waiters = []
    for (const waiter of waiters) {
      clearTimeout(waiter.timer)
      waiter.cb(err ? this.unavailableError() : null)
    }
  }

  /** Stop following the client; requests still waiting fail. */
  stop () {
    this.client.off('ready', this.onReady)
    this.client.off('error', this.onError)
    this.client.off('end', this.onEnd)
    this.flushWaiters(new Error('store closed'))
  }
}

module.exports = { RedisAvailability }
