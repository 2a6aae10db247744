'use strict'

/**
 * Our own worker_threads pool behind offload(): pre-warmed threads, idle-first
 * dispatch, a bounded FIFO queue, per-task timeouts counted from dispatch,
 * AbortSignal support, crash isolation, graceful close and stats.
 */

const { performance } = require('node:perf_hooks')
const debug = require('debug')('clusterize:pool')
const registry = require('./registry')
const { normalizeOptions } = require('./options')
const { resolveTask, unwrapTransfers, cloneError } = require('./task')
const Queue = require('./queue')
const Samples = require('./samples')
const { QueueFullError, TaskAbortedError, PoolClosedError, OffloadOptionError } = require('./errors')
const { MAX_TIMER_MS } = require('../errors')
const { Task } = require('./records')
const { PoolThreads } = require('./threads')

const now = performance.now.bind(performance)
const noop = () => {}

let nextPoolId = 1

/**
 * A pool of worker threads. Create it with `createPool(options)`.
 * PoolThreads (./threads.js) is the thread lifecycle half (start, crash,
 * timeout, retire); this class adds dispatch, the queue and the public API.
 */
class Pool extends PoolThreads {
  /**
   * @param {object} [options] see the README, "Offload" (threads, maxQueue, taskTimeoutMs, resourceLimits, setup, maxStartupFailures, niceness)
   * @param {{ prefix?: string, middleware?: boolean, normalized?: boolean }} [ctx]
   */
  constructor (options, ctx = {}) {
    super()
    const opts = ctx.normalized ? options : normalizeOptions(options, ctx)
    this.id = nextPoolId++
    this.options = opts
    this._threads = []
    this._idle = []
    this._queue = new Queue()
    this._queued = 0
    this._busy = 0
    this._pending = 0
    this._nextThreadId = 1
    this._starting = 0
    this._startupFailures = 0
    this._respawnTimer = null
    this._broken = null
    this._closing = false
    this._closed = false
    this._closePromise = null
    this._drained = null
    this._avgRunMs = 0
    this._counters = { completed: 0, failed: 0, cancelled: 0, timedOut: 0, rejected: 0, crashed: 0, replaced: 0 }
    this._wait = new Samples(1024)
    this._run = new Samples(1024)
    this._keepAlive = setInterval(noop, 1 << 30)
    this._keepAlive.unref()
    this._bindThreadEvents()
    for (let i = 0; i < opts.threads; i++) this._spawn()
    registry.register(this)
    debug('pool %d created: %d threads, maxQueue %d, taskTimeoutMs %d', this.id, opts.threads, opts.maxQueue, opts.taskTimeoutMs)
  }

  /** Tasks waiting for a thread. */
  get queued () { return this._queued }
  /** Threads currently running a task. */
  get busy () { return this._busy }
  /** Number of live threads (starting or ready). */
  get threads () { return this._threads.length }

  /**
   * Run `task(...args)` in a thread.
   * @param {Function|object} task a self-contained function or offload.task(modulePath, exportName)
   * @param {...unknown} args
   * @returns {Promise<unknown>}
   */
  run (task, ...args) {
    return this.exec(task, args)
  }

  /**
   * Run `task(...args)` in a thread with per-call options.
   * @param {Function|object} task
   * @param {unknown[]} [args]
   * @param {{ signal?: AbortSignal, timeoutMs?: number, terminateOnAbort?: boolean }} [options]
   * @returns {Promise<unknown>}
   */
  exec (task, args = [], options) {
    if (this._closing) return Promise.reject(new PoolClosedError(this._closed ? 'offload pool is closed' : 'offload pool is closing'))
    if (this._broken !== null && this._threads.length === 0) return Promise.reject(this._broken)
    let entry
    try {
      entry = resolveTask(task)
    } catch (err) {
      return Promise.reject(err)
    }
    if (!Array.isArray(args)) return Promise.reject(new OffloadOptionError('offload: args must be an array', 'args'))
    let timeoutMs = this.options.taskTimeoutMs
    let signal = null
    let terminateOnAbort = true
    if (options !== undefined && options !== null) {
      if (options.timeoutMs !== undefined) {
        if (!Number.isInteger(options.timeoutMs) || options.timeoutMs < 0 || options.timeoutMs > MAX_TIMER_MS) return Promise.reject(new OffloadOptionError(`offload: option "timeoutMs" must be an integer from 0 to ${MAX_TIMER_MS} (ms), got ${options.timeoutMs}`, 'timeoutMs'))
        timeoutMs = options.timeoutMs
      }
      if (options.signal != null) {
        signal = options.signal
        if (signal.aborted) {
          this._counters.cancelled++
          return Promise.reject(new TaskAbortedError(signal.reason))
        }
      }
      if (options.terminateOnAbort === false) terminateOnAbort = false
    }
    const idle = this._idle
    // threads still starting count as capacity: a fresh pool accepts its first tasks
    if (idle.length === 0 && this._queued >= this.options.maxQueue + this._starting) {
      this._counters.rejected++
      return Promise.reject(new QueueFullError(this.options.maxQueue, this._retryAfter()))
    }
    const transfer = unwrapTransfers(args)
    let t
    const promise = new Promise((resolve, reject) => {
      t = new Task(entry, args, transfer, timeoutMs, signal, terminateOnAbort, resolve, reject)
    })
    if (signal !== null) {
      t.onAbort = () => this._abort(t)
      signal.addEventListener('abort', t.onAbort, { once: true })
    }
    if (this._pending++ === 0) this._keepAlive.ref()
    t.enqueuedAt = now()
    if (idle.length > 0) {
      const th = idle.pop()
      if (!this._start(th, t)) this._next(th)
    } else {
      this._queue.push(t)
      this._queued++
    }
    return promise
  }

  _retryAfter () {
    const threads = Math.max(1, this._threads.length)
    const seconds = Math.ceil(((this._queued + this._busy) * this._avgRunMs) / threads / 1000)
    return Math.min(60, Math.max(1, seconds))
  }

  /** Send `t` to the idle thread `th`; false when its arguments cannot be sent (t is rejected). */
  _start (th, t) {
    try {
      th.run(t)
    } catch (err) {
      this._counters.failed++
      this._settle(t, false, cloneError(t.args, err))
      return false
    }
    this._wait.add(t.startedAt - t.enqueuedAt)
    t.args = null
    t.transfer = undefined
    this._busy++
    return true
  }

  /** Give `th` the next queued task, or mark it idle. */
  _next (th) {
    const queue = this._queue
    while (this._queued > 0) {
      const t = queue.shift()
      if (t.done) continue
      this._queued--
      if (this._start(th, t)) return
    }
    if (queue.length > 0) queue.clear() // only cancelled leftovers
    if (!th.retiring) this._idle.push(th)
  }

  _onDone (th, t, ok, value) {
    this._busy--
    const runMs = now() - t.startedAt
    this._run.add(runMs)
    this._avgRunMs = this._avgRunMs === 0 ? runMs : this._avgRunMs * 0.9 + runMs * 0.1
    if (ok) this._counters.completed++
    else this._counters.failed++
    this._settle(t, ok, value)
    this._next(th)
  }

  _settle (t, ok, value) {
    if (t.done) return
    t.done = true
    if (t.onAbort !== null) t.signal.removeEventListener('abort', t.onAbort)
    t.signal = null
    t.onAbort = null
    if (ok) t.resolve(value)
    else t.reject(value)
    if (--this._pending === 0) {
      this._keepAlive.unref()
      if (this._drained !== null) this._drained()
    }
  }

  _abort (t) {
    if (t.done) return
    const th = t.thread
    if (th === null) {
      // still queued: drop it (lazily removed from the queue)
      this._queued--
      this._counters.cancelled++
      debug('pool %d: queued task cancelled', this.id)
      return this._settle(t, false, new TaskAbortedError(t.signal && t.signal.reason))
    }
    if (!t.terminateOnAbort) return
    this._counters.cancelled++
    debug('pool %d: running task aborted, terminating thread %d', this.id, th.id)
    this._killRunning(th, new TaskAbortedError(t.signal && t.signal.reason))
  }

  /**
   * Pool statistics.
   * @returns {object} see PoolStats in types/index.d.ts
   */
  stats () {
    const c = this._counters
    return {
      threads: this._threads.length,
      busy: this._busy,
      idle: this._idle.length,
      queued: this._queued,
      maxQueue: this.options.maxQueue,
      completed: c.completed,
      failed: c.failed,
      cancelled: c.cancelled,
      timedOut: c.timedOut,
      rejected: c.rejected,
      crashed: c.crashed,
      replaced: c.replaced,
      waitTime: this._wait.percentiles(),
      runTime: this._run.percentiles(),
      broken: this._broken === null ? null : this._broken.message,
      closing: this._closing
    }
  }

  /**
   * Stop accepting tasks, let running and queued tasks finish (up to
   * `timeoutMs`), then terminate every thread. Tasks still unfinished at the
   * deadline reject with PoolClosedError. Idempotent.
   * @param {{ timeoutMs?: number }} [options] default 30000
   * @returns {Promise<{ drained: boolean }>}
   */
  close (options = {}) {
    if (this._closePromise !== null) return this._closePromise
    const timeoutMs = options && options.timeoutMs !== undefined ? options.timeoutMs : 30000
    this._closing = true
    registry.unregister(this)
    debug('pool %d closing: %d running, %d queued', this.id, this._busy, this._queued)
    const drained = this._pending === 0 || this._broken !== null
      ? Promise.resolve(true)
      : new Promise((resolve) => {
        // Closing never fails: a deadline past what a timer can wait (it would
        // fire after 1 ms) means as long as a timer can wait.
        const timer = setTimeout(() => resolve(false), Math.min(Math.max(0, timeoutMs), MAX_TIMER_MS))
        this._drained = () => { clearTimeout(timer); resolve(true) }
      })
    this._closePromise = drained.then((ok) => {
      this._drained = null
      this._closed = true
      const err = new PoolClosedError('offload pool closed before the task finished')
      this._rejectQueued(err)
      const exits = []
      for (const th of this._threads.slice()) {
        exits.push(th.exited())
        const t = this._retire(th)
        if (t !== null) {
          this._busy--
          this._settle(t, false, err)
        }
      }
      if (this._respawnTimer !== null) clearTimeout(this._respawnTimer)
      clearInterval(this._keepAlive)
      return Promise.all(exits).then(() => {
        debug('pool %d closed (drained: %s)', this.id, ok)
        return { drained: ok }
      })
    })
    return this._closePromise
  }

  /**
   * Terminate every thread now; running and queued tasks reject.
   * @returns {Promise<{ drained: boolean }>}
   */
  destroy () {
    return this.close({ timeoutMs: 0 })
  }
}

/**
 * Create a pool; its threads start at once (pre-warmed).
 * @param {object} [options]
 * @returns {Pool}
 */
function createPool (options) {
  return new Pool(options)
}

module.exports = { createPool, Pool }
