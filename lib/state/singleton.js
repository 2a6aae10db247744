'use strict'

/**
 * singleton(name, start): work that must run on exactly one worker of the
 * cluster (of the fleet, with bus.redis): a queue consumer, a poller, a
 * socket to an upstream. Every worker calls it; the primary's singleton
 * service hands the name to one of them, which runs `start(signal, token)`.
 *
 * - `signal` aborts when this worker drains (reload, recycle, shutdown),
 *   when the lease is lost, when the job is stop()ped, or when start()'s
 *   promise rejects; `signal.reason.reason` says which.
 * - The lease is held from start() until the signal aborts and start()'s
 *   promise (if it returned one) has settled: only then is it released and
 *   handed to another worker, so two runs never overlap. A start() that
 *   returns at once (it set up a timer) holds the lease until the abort.
 * - `token` grows with each new holder (fencing: a database can refuse the
 *   writes of a stale holder).
 * - start() that throws or rejects: logged, the lease released, and the
 *   job started again (on whichever worker gets it) after a short pause.
 * - With a lease that can run out (bus.redis: another host takes the name
 *   once its key expires), the holder does not wait for its primary to say
 *   the lease is lost: a primary that stalls (GC, CPU quota, SIGSTOP) says
 *   nothing. It confirms the lease every leaseMs/6; each answer says how long
 *   the lease is still this host's, and the worker counts that from before
 *   it asked. When that time passes with no newer answer, the signal aborts,
 *   whatever the primary is doing, still leaving leaseMs/3 before the key can
 *   expire and another host start (./lease-redis.js). A run starts only after
 *   its first confirmation.
 */

const debug = require('debug')('clusterize:singleton')
const { performance } = require('perf_hooks')
const { ClusterizeError, ClusterizeOptionError } = require('../errors')
const { serviceClient } = require('./client')
const { runInSingleton } = require('./singleton-context')
const { singletonService, SINGLETON_OP, MAX_NAME_LENGTH, MIN_LEASE_MS, MAX_LEASE_MS } = require('./singleton-service')

const DEFAULT_LEASE_MS = 5000
/** A long poll's length: the primary answers at the latest after this. */
const POLL_MS = 5000
/** Beyond a long poll, before the worker gives up on the answer. */
const POLL_GRACE_MS = 2000
const RETRY_MS = 500
const RESTART_PAUSE_MS = 1000
/** Confirmations per lease: a few chances to renew the bound before it runs out. */
const CONFIRMS_PER_LEASE = 6

/** The singletons of this process, by name: one each (two would hold one lease as one owner). */
const running = new Map()
let drainHookInstalled = false

/**
 * @param {string} name the job's name, the same in every worker (and host)
 * @param {(signal: AbortSignal, token: number) => (void|Promise<void>)} start
 * @param {{ leaseMs?: number, logger?: object, client?: object }} [options]
 *   leaseMs: with bus.redis, how long a host keeps the name without renewing it (default 5000):
 *   another host takes over within about leaseMs (+ a quarter) of a host's loss
 * @returns {{ stop: () => Promise<void>, readonly running: boolean, readonly token: number|null, readonly name: string }}
 */
function singleton (name, start, options) {
  options = options || {}
  if (typeof name !== 'string' || name === '' || name.length > MAX_NAME_LENGTH) {
    throw new ClusterizeOptionError(`singleton(name, start): name must be a non-empty string of at most ${MAX_NAME_LENGTH} characters`, 'name')
  }
  if (typeof start !== 'function') throw new ClusterizeOptionError(`singleton("${name}", start): start must be a function, got ${typeof start}`, 'start')
  const leaseMs = options.leaseMs === undefined ? DEFAULT_LEASE_MS : options.leaseMs
  if (!Number.isInteger(leaseMs) || leaseMs < MIN_LEASE_MS || leaseMs > MAX_LEASE_MS) {
    throw new ClusterizeOptionError(`singleton("${name}"): option "leaseMs" must be an integer from ${MIN_LEASE_MS} to ${MAX_LEASE_MS}, got ${String(leaseMs)}`, 'leaseMs')
  }
  // With a client of its own (tests modelling several workers in one process) the job is not this process's.
  const own = !options.client
  if (own && running.has(name)) {
    throw new ClusterizeError(`singleton("${name}") is already running in this process: call it once per process (every worker calls it once)`, 'ERR_CLUSTERIZE_SINGLETON_TWICE')
  }
  const job = new SingletonJob(name, start, { leaseMs, log: options.logger || null, client: options.client || null })
  if (own) running.set(name, job)
  installDrainHook()
  job.run()
  return job.handle
}

class SingletonJob {
  constructor (name, start, options) {
    this.name = name
    this.start = start
    this.leaseMs = options.leaseMs
    this.log = options.log
    this.client = options.client
    this.stopped = false
    /** The run that holds the lease now: { token, controller, settled } */
    this.current = null
    this.finished = null
    this.wakeUp = null
    const job = this
    this.handle = {
      name,
      stop: (reason) => job.stop(reason || 'stopped'),
      get running () { return job.current !== null },
      get token () { return job.current === null ? null : job.current.token }
    }
  }

  request (op, data, timeoutMs) {
    try {
      if (this.client === null) this.client = serviceClient(singletonService)
    } catch (err) {
      return Promise.reject(err)
    }
    return Promise.resolve().then(() => this.client.request(op, Object.assign({ name: this.name }, data), { timeoutMs }))
  }

  run () {
    this.finished = this.loop().catch((err) => {
      this.error(`singleton "${this.name}" stopped on an unexpected error: ${err && err.message}`)
    }).finally(() => {
      if (running.get(this.name) === this) running.delete(this.name)
    })
  }

  async loop () {
    let reportedUnavailable = false
    while (!this.stopped) {
      let answer
      try {
        answer = await this.request(SINGLETON_OP.ACQUIRE, { waitMs: POLL_MS, leaseMs: this.leaseMs }, POLL_MS + POLL_GRACE_MS)
        reportedUnavailable = false
      } catch (err) {
        if (!reportedUnavailable) debug('%s: acquire failed: %s', this.name, err && err.message)
        reportedUnavailable = true
        await this.pause(RETRY_MS)
        continue
      }
      if (!answer || answer.granted !== true) continue
      if (this.stopped) {
        await this.release(answer.token)
        break
      }
      const failed = await this.hold(answer.token)
      if (failed && !this.stopped) await this.pause(RESTART_PAUSE_MS)
    }
  }

  /**
   * Run start() with the lease; resolve once it is released.
   * @returns {Promise<boolean>} whether start() failed
   */
  async hold (token) {
    const controller = new AbortController()
    let ended
    const run = { token, controller, failed: false, deadline: null, deadlineTimer: null, done: new Promise((resolve) => { ended = resolve }) }
    // Start only with a bound on how long the lease is ours, counted from before asking.
    const first = await this.confirm(run)
    if (first === null || !first.held || this.stopped) {
      debug('%s: token %d not confirmed, not started: %s', this.name, token, first === null ? 'no answer' : (first.held ? 'stopped' : 'not held'))
      await this.release(token)
      ended()
      return false
    }
    this.current = run
    debug('%s: running here (pid %d, token %d)', this.name, process.pid, token)
    if (run.deadline === null) this.watch(run).catch((err) => debug('%s: watch stopped: %s', this.name, err && err.message))
    else this.keepConfirming(run).catch((err) => debug('%s: confirmations stopped: %s', this.name, err && err.message))
    let outcome
    try {
      // Its timers and callbacks inherit the context: the cron pitfall checks see they are coordinated.
      outcome = Promise.resolve(runInSingleton(this.name, () => this.start(controller.signal, token)))
    } catch (err) {
      outcome = Promise.reject(err)
    }
    const settled = outcome.then(() => {}, (err) => {
      run.failed = true
      this.error(`singleton "${this.name}": start() failed: ${err && err.message}; released, it starts again in ${RESTART_PAUSE_MS} ms`)
      this.abort(run, 'failed')
    })
    await new Promise((resolve) => {
      if (controller.signal.aborted) return resolve()
      controller.signal.addEventListener('abort', resolve, { once: true })
    })
    clearTimeout(run.deadlineTimer)
    // The next holder starts only once this run is over.
    await settled
    this.current = null
    await this.release(token)
    ended()
    return run.failed
  }

  /**
   * Ask the primary whether `run` still holds the lease and for how long; move its deadline
   * (counted from before asking) when the lease can run out.
   * @returns {Promise<{ held: boolean, validMs: number|null }|null>} null: no answer
   */
  async confirm (run) {
    const askedAt = performance.now()
    let answer
    try {
      answer = await this.request(SINGLETON_OP.CONFIRM, { token: run.token }, Math.max(1000, this.leaseMs))
    } catch (err) {
      debug('%s: confirmation failed: %s', this.name, err && err.message)
      return null
    }
    if (!answer || answer.held !== true) return { held: false, validMs: 0 }
    if (typeof answer.validMs === 'number') this.extend(run, askedAt + answer.validMs)
    return answer
  }

  /** The lease is ours until `deadline` (performance.now()) at least: abort the run then, unless confirmed again. */
  extend (run, deadline) {
    if (run.deadline !== null && deadline <= run.deadline) return
    run.deadline = deadline
    clearTimeout(run.deadlineTimer)
    if (run.controller.signal.aborted) return
    run.deadlineTimer = setTimeout(() => {
      if (run.controller.signal.aborted) return
      this.warn(`singleton "${this.name}": the lease (token ${run.token}) could not be confirmed in time (the primary did not answer): stopping the job in this worker before another host may take it`)
      this.abort(run, 'lease-lost')
    }, Math.max(0, deadline - performance.now()))
    run.deadlineTimer.unref()
  }

  /** A lease that can run out: confirm it every leaseMs/6; abort the run when it is lost. */
  async keepConfirming (run) {
    const signal = run.controller.signal
    const every = Math.max(10, Math.floor(this.leaseMs / CONFIRMS_PER_LEASE))
    while (!signal.aborted) {
      await new Promise((resolve) => {
        const timer = setTimeout(function due () {
          signal.removeEventListener('abort', aborted)
          resolve()
        }, every)
        timer.unref()
        function aborted () {
          clearTimeout(timer)
          resolve()
        }
        signal.addEventListener('abort', aborted, { once: true })
      })
      if (signal.aborted) return
      const answer = await this.confirm(run)
      if (answer !== null && !answer.held && !signal.aborted) {
        this.warn(`singleton "${this.name}": the lease was lost (token ${run.token}): stopping the job in this worker`)
        this.abort(run, 'lease-lost')
      }
    }
  }

  /** Long-poll the primary: abort the run when the lease is taken away. */
  async watch (run) {
    const signal = run.controller.signal
    while (!signal.aborted) {
      let answer
      try {
        answer = await this.request(SINGLETON_OP.WATCH, { token: run.token, waitMs: POLL_MS }, POLL_MS + POLL_GRACE_MS)
      } catch (err) {
        debug('%s: watch failed: %s', this.name, err && err.message)
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS).unref())
        continue
      }
      if (answer && answer.held === false && !signal.aborted) {
        this.warn(`singleton "${this.name}": the lease was lost (token ${run.token}): stopping the job in this worker`)
        this.abort(run, 'lease-lost')
      }
    }
  }

  abort (run, reason) {
    if (run.controller.signal.aborted) return
    run.controller.abort(new ClusterizeError(`singleton "${this.name}" stopped here: ${reason}`, 'ERR_CLUSTERIZE_SINGLETON_ABORTED', { reason }))
  }

  async release (token) {
    try {
      await this.request(SINGLETON_OP.RELEASE, { token }, POLL_GRACE_MS)
      debug('%s: released (token %d)', this.name, token)
    } catch (err) {
      // The primary frees it when this process exits.
      debug('%s: release failed: %s', this.name, err && err.message)
    }
  }

  /**
   * Stop for good in this process: abort the run here (if it holds the
   * lease), wait for it to end and release.
   * @param {string} reason 'stopped' | 'drain'
   */
  async stop (reason) {
    this.stopped = true
    if (running.get(this.name) === this) running.delete(this.name)
    if (this.wakeUp !== null) this.wakeUp()
    // An ask still pending in the primary needs no wait: a grant that comes after this is released at once.
    if (this.current !== null) {
      const run = this.current
      this.abort(run, reason)
      await run.done
    }
  }

  pause (ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms)
      timer.unref()
      const job = this
      this.wakeUp = done
      function done () {
        clearTimeout(timer)
        job.wakeUp = null
        resolve()
      }
    })
  }

  warn (message) {
    if (this.log) this.log.warn(message, { pid: process.pid })
    else debug(message)
  }

  error (message) {
    if (this.log) this.log.error(message, { pid: process.pid })
    else debug(message)
  }
}

/** A draining worker stops its singletons, so another worker takes them over. */
function installDrainHook () {
  if (drainHookInstalled) return
  drainHookInstalled = true
  require('../lifecycle').onDrain(function stopSingletons () {
    return Promise.all(Array.from(running.values(), (job) => job.stop('drain')))
  })
}

/** Stop every singleton of this process (shutdown of a single process, tests). */
function stopAllSingletons () {
  return Promise.all(Array.from(running.values(), (job) => job.stop('stopped')))
}

module.exports = { singleton, stopAllSingletons, DEFAULT_LEASE_MS, POLL_MS }
