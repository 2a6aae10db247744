'use strict'

/**
 * The one Redis up/down state machine. The session store (503 at once while
 * Redis is down), the bus's Redis bridge and socket.io recovery's shared log
 * each keep one, so "is Redis there?" has one meaning and every outage is
 * logged once, when it starts, and once when it ends.
 *
 *   'connecting' --markUp()--> 'up' --markDown(cause)--> 'down' --markUp()--> 'up' ...
 *   'connecting' --markDown(cause)--> 'down'  (the first connection failed)
 *
 * markUp()/markDown() return true on a transition and call `onChange(up,
 * cause, from)` then; repeated failures while down only update lastError.
 * What counts as up or down is the caller's: a client's events (follow()),
 * a publish or an XADD that failed or went through.
 *
 * RedisGate (below) is the session store's use of it: a command waits for
 * the first connection (starting is not an outage) and fails at once while
 * Redis is down.
 */

const debug = require('debug')('clusterize:redis')
const { explainRedisError } = require('./explain')

class RedisAvailability {
  /**
   * @param {{ onChange?: (up: boolean, cause: string|undefined, from: 'connecting'|'up'|'down') => void }} [options]
   */
  constructor (options) {
    /** @type {'connecting'|'up'|'down'} */
    this.status = 'connecting'
    this.everUp = false
    /** Why it is down now (null while up or still connecting without an error). */
    this.cause = null
    /** The last error seen, kept after Redis is back (for /stats). */
    this.lastError = null
    this.lastErrorAt = null
    this.onChange = (options && options.onChange) || null
  }

  get isUp () { return this.status === 'up' }

  /** @returns {boolean} true when it was not up */
  markUp () {
    if (this.status === 'up') return false
    const from = this.status
    this.status = 'up'
    this.everUp = true
    this.cause = null
    if (this.onChange !== null) this.onChange(true, undefined, from)
    return true
  }

  /**
   * @param {string} cause already readable (see explainRedisError)
   * @returns {boolean} true when it was up or still connecting
   */
  markDown (cause) {
    this.noteError(cause)
    this.cause = cause
    if (this.status === 'down') return false
    const from = this.status
    this.status = 'down'
    if (this.onChange !== null) this.onChange(false, cause, from)
    return true
  }

  /** An error that does not by itself mean Redis is down (a command that failed): kept for /stats. */
  noteError (cause) {
    this.lastError = cause
    this.lastErrorAt = new Date().toISOString()
  }

  /**
   * Follow an ioredis client: 'ready' is up, 'error' and 'close' are down.
   * @param {import('ioredis').Redis|import('ioredis').Cluster} client
   * @param {string} [which] names the connection in the cause ('publisher: ...')
   * @returns {() => void} stops following
   */
  follow (client, which) {
    const label = which ? `${which}: ` : ''
    const onReady = () => this.markUp()
    const onError = (err) => {
      debug('%serror: %s', label, err && err.message)
      this.markDown(label + explainRedisError(err))
    }
    const onClose = () => { if (this.status === 'up') this.markDown(`${label}connection closed`) }
    client.on('ready', onReady)
    client.on('error', onError)
    client.on('close', onClose)
    if (client.status === 'ready') this.markUp()
    return function unfollow () {
      client.off('ready', onReady)
      client.off('error', onError)
      client.off('close', onClose)
    }
  }
}

/** Still making its first connection. */
const CONNECTING = ['wait', 'connecting', 'connect']

/**
 * A gate in front of one client's commands: they wait for the first
 * connection (up to timeoutMs), run at once while it is ready, and fail at
 * once while Redis is unreachable (instead of every caller waiting for a
 * command timeout); it opens again by itself when Redis returns.
 */
class RedisGate {
  /**
   * @param {import('ioredis').Redis|import('ioredis').Cluster} client
   * @param {{ timeoutMs: number, unavailableError: (reason: string) => Error }} options
   *   unavailableError: the error a refused command gets (the session store's is a 503)
   */
  constructor (client, options) {
    this.client = client
    this.timeoutMs = options.timeoutMs
    this.makeError = options.unavailableError
    this.waiters = []
    this.availability = new RedisAvailability()
    this.unfollow = this.availability.follow(client)
    this.onReady = () => this.flushWaiters(null)
    this.onError = (err) => {
      // Retrying will not fix a refused password: answer the waiting requests now.
      if (!this.availability.everUp && /^(WRONGPASS|NOAUTH|NOPERM)/.test(err && err.message)) this.flushWaiters(err)
    }
    this.onEnd = () => this.flushWaiters(new Error(this.availability.cause || 'connection closed'))
    client.on('ready', this.onReady)
    client.on('error', this.onError)
    client.on('end', this.onEnd)
  }

  get lastError () { return this.availability.cause }

  /** @returns {{ available: boolean, lastError: string|null }} */
  state () {
    const status = this.client.status
    // Still making its first connection, with no error yet: not an outage (the
    // gate waits for it), so no "unavailable" alarm at every start.
    const firstConnect = !this.availability.everUp && this.availability.cause === null && CONNECTING.includes(status)
    const available = status === 'ready' || firstConnect
    return { available, lastError: available ? null : (this.availability.cause || `connection ${status}`) }
  }

  /**
   * Call back with null when Redis can take commands, or with the
   * unavailable error. Before the first connection it waits up to timeoutMs;
   * after that a disconnected Redis fails at once.
   * @param {(err: Error|null) => void} cb
   */
  check (cb) {
    const status = this.client.status
    if (status === 'ready') return cb(null)
    if (!this.availability.everUp && CONNECTING.includes(status)) {
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
   * Run `run` once Redis has connected for the first time: a command right
   * after creation waits for that, instead of failing at once on the
   * client's disabled offline queue. After the first connection it runs at
   * once, and a disconnected Redis fails fast.
   * @param {(err: Error) => void} fail
   * @param {() => void} run
   */
  afterFirstConnection (fail, run) {
    if (this.availability.everUp || this.client.status === 'ready') return run()
    this.check(function firstConnection (err) {
      if (err) return fail(err)
      run()
    })
  }

  /** @returns {Error} */
  unavailableError () {
    return this.makeError(this.availability.cause || `connection ${this.client.status}`)
  }

  flushWaiters (err) {
    const waiters = this.waiters
    this.waiters = []
    for (const waiter of waiters) {
      clearTimeout(waiter.timer)
      waiter.cb(err ? this.unavailableError() : null)
    }
  }

  /** Stop following the client; commands still waiting fail. */
  stop () {
    this.unfollow()
    this.client.off('ready', this.onReady)
    this.client.off('error', this.onError)
    this.client.off('end', this.onEnd)
    this.flushWaiters(new Error('closed'))
  }
}

module.exports = { RedisAvailability, RedisGate }
