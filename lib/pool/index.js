'use strict'

/**
 * Our own worker_threads pool behind offload(): pre-warmed threads, idle-first
 * dispatch, a bounded FIFO queue, per-task timeouts counted from dispatch,
 * AbortSignal support, crash isolation, graceful close and stats.
 *
 * The Pool owns the queue, dispatch, counters and lifecycle (start, replace,
 * back off, close). Each thread is a PoolThread (./thread.js) that owns its
 * Worker, running task, deadline and state; the pool drives it through its
 * methods and hears from it through its events.
 */

const { performance } = require('node:perf_hooks')
const debug = require('debug')('clusterize:pool')
const registry = require('./registry')
const { normalizeOptions, readCall } = require('./options')
const { unwrapTransfers, cloneError } = require('./task')
const TaskQueue = require('./task-queue')
const Pending = require('./pending')
const PoolMetrics = require('./metrics')
const StartupBackoff = require('./backoff')
const { PoolThread } = require('./thread')
const { activeSpanContext } = require('../telemetry')
const { QueueFullError, TaskAbortedError, TaskTimeoutError, ThreadStartupError, PoolClosedError } = require('./errors')
const { Task, removeItem } = require('./records')

const now = performance.now.bind(performance)

let nextPoolId = 1

/** A pool of worker threads. Create it with `createPool(options)`. */
class Pool {
  /**
   * @param {object} [options] see docs/offload.md, "Options" (threads, maxQueue, taskTimeoutMs, resourceLimits, setup, maxStartupFailures, niceness)
   * @param {{ prefix?: string, middleware?: boolean, normalized?: boolean }} [ctx]
   */
  constructor (options, ctx = {}) {
    const opts = ctx.normalized ? options : normalizeOptions(options, ctx)
    this.id = nextPoolId++
    this.options = opts
    this._threads = []
    this._idle = []
    this._queue = new TaskQueue()
    this._busy = 0
    this._pending = new Pending()
    this._nextThreadId = 1
    this._starting = 0
    this._backoff = new StartupBackoff(opts.maxStartupFailures)
    this._broken = null
    this._closing = false
    this._closed = false
    this._closePromise = null
    this._metrics = new PoolMetrics()
    // one bound handler per event for all threads, not a closure per thread
    this._onReady = this._onReady.bind(this)
    this._onDone = this._onDone.bind(this)
    this._onTimeout = this._onTimeout.bind(this)
    this._onStartupFailure = this._onStartupFailure.bind(this)
    this._onThreadExit = this._onThreadExit.bind(this)
    this._respawn = () => { if (!this._closed) this._spawn() }
    for (let i = 0; i < opts.threads; i++) this._spawn()
    registry.register(this)
    debug('pool %d created: %d threads, maxQueue %d, taskTimeoutMs %d', this.id, opts.threads, opts.maxQueue, opts.taskTimeoutMs)
  }

  /** Tasks waiting for a thread. */
  get queued () { return this._queue.length }
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
    let call
    try {
      call = readCall(task, args, options, this.options.taskTimeoutMs)
    } catch (err) {
      return Promise.reject(err)
    }
    const signal = call.signal
    if (signal !== null && signal.aborted) {
      this._metrics.cancelled++
      return Promise.reject(new TaskAbortedError(signal.reason))
    }
    const idle = this._idle
    // threads still starting count as capacity: a fresh pool accepts its first tasks
    if (idle.length === 0 && this._queue.length >= this.options.maxQueue + this._starting) {
      this._metrics.rejected++
      return Promise.reject(new QueueFullError(this.options.maxQueue, this._metrics.retryAfter(this._queue.length + this._busy, this._threads.length)))
    }
    const transfer = unwrapTransfers(args)
    let t
    const promise = new Promise((resolve, reject) => {
      t = new Task(call.entry, args, transfer, call.timeoutMs, signal, call.terminateOnAbort, resolve, reject)
    })
    // Read here, in the caller's async context (a request's span), not when a thread frees up.
    t.trace = activeSpanContext()
    if (signal !== null) {
      t.onAbort = () => this._abort(t)
      signal.addEventListener('abort', t.onAbort, { once: true })
    }
    this._pending.add()
    t.enqueuedAt = now()
    if (idle.length > 0) {
      const th = idle.pop()
      if (!this._start(th, t)) this._next(th)
    } else {
      this._queue.push(t)
    }
    return promise
  }

  /** Send `t` to the idle thread `th`; false when its arguments cannot be sent (t is rejected). */
  _start (th, t) {
    try {
      th.run(t)
    } catch (err) {
      this._metrics.failed++
      this._settle(t, false, cloneError(t.args, err))
      return false
    }
    this._metrics.waited(t.startedAt - t.enqueuedAt)
    t.args = null
    t.transfer = undefined
    this._busy++
    return true
  }

  /** Give `th` the next queued task, or mark it idle. */
  _next (th) {
    let t
    while ((t = this._queue.shift()) !== undefined) {
      if (this._start(th, t)) return
    }
    if (!th.retiring) this._idle.push(th)
  }

  _onDone (th, t, ok, value) {
    this._busy--
    this._metrics.ran(now() - t.startedAt)
    if (ok) this._metrics.completed++
    else this._metrics.failed++
    this._settle(t, ok, value)
    this._next(th)
  }

  _settle (t, ok, value) {
    if (t.settle(ok, value)) this._pending.settled()
  }

  _abort (t) {
    if (t.done) return
    const th = t.thread
    if (th === null) {
      this._queue.cancelled()
      this._metrics.cancelled++
      debug('pool %d: queued task cancelled', this.id)
      return this._settle(t, false, new TaskAbortedError(t.signal && t.signal.reason))
    }
    if (!t.terminateOnAbort) return
    this._metrics.cancelled++
    debug('pool %d: running task aborted, terminating thread %d', this.id, th.id)
    this._killRunning(th, new TaskAbortedError(t.signal && t.signal.reason))
  }

  _onTimeout (th, t) {
    this._metrics.timedOut++
    debug('pool %d: task timed out after %d ms on thread %d, replacing it', this.id, t.timeoutMs, th.id)
    this._killRunning(th, new TaskTimeoutError(t.timeoutMs))
  }

  /** Reject the running task of `th`, terminate the thread and start a replacement. */
  _killRunning (th, err) {
    const t = this._retire(th)
    this._busy--
    this._settle(t, false, err)
    this._replace()
  }

  /** Terminate `th` and forget it; returns the task it was running, or null. */
  _retire (th) {
    this._forget(th)
    return th.retire()
  }

  /** Take `th` out of the pool's lists (it is retiring or has exited). */
  _forget (th) {
    if (th.starting) this._starting--
    removeItem(this._threads, th)
    removeItem(this._idle, th)
  }

  _replace () {
    if (this._closed) return
    this._metrics.replaced++
    this._spawn()
  }

  _spawn () {
    const th = new PoolThread(this._nextThreadId++, this.options)
    th.on('ready', this._onReady)
    th.on('done', this._onDone)
    th.on('timeout', this._onTimeout)
    th.on('startupFailure', this._onStartupFailure)
    th.on('exit', this._onThreadExit)
    this._threads.push(th)
    this._starting++
    return th
  }

  _onReady (th) {
    this._starting--
    this._backoff.reset()
    this._next(th)
  }

  _onThreadExit (th, t, code) {
    this._forget(th)
    if (t !== null) {
      this._busy--
      this._metrics.failed++
      this._metrics.crashed++
      debug('pool %d: thread %d died running a task (%s), replacing it', this.id, th.id, th.exitReason(code))
      this._settle(t, false, th.crashError(code))
    } else {
      debug('pool %d: idle thread %d exited (%s), replacing it', this.id, th.id, th.exitReason(code))
    }
    this._replace()
  }

  _onStartupFailure (th, reason, code) {
    // the pool counted it as starting until now: it exited before it was ready
    this._starting--
    removeItem(this._threads, th)
    if (this._closed) return
    if (this._backoff.failed(this._respawn)) {
      debug('pool %d: thread %d failed at startup (%d in a row): %s', this.id, th.id, this._backoff.failures, reason)
      return
    }
    debug('pool %d: thread %d failed at startup (%d in a row), giving up: %s', this.id, th.id, this._backoff.failures, reason)
    this._broken = new ThreadStartupError(reason, th.error || undefined)
    this._broken.exitCode = code
    if (this._threads.length === 0) this._rejectQueued(this._broken)
  }

  _rejectQueued (err) {
    let t
    while ((t = this._queue.shift()) !== undefined) this._settle(t, false, err)
  }

  /**
   * Pool statistics.
   * @returns {object} see PoolStats in types/index.d.ts
   */
  stats () {
    return {
      threads: this._threads.length,
      busy: this._busy,
      idle: this._idle.length,
      queued: this._queue.length,
      maxQueue: this.options.maxQueue,
      ...this._metrics.snapshot(),
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
    debug('pool %d closing: %d running, %d queued', this.id, this._busy, this._queue.length)
    // a broken pool has no thread to drain into
    const drained = this._broken !== null ? Promise.resolve(true) : this._pending.drained(timeoutMs)
    this._closePromise = drained.then((ok) => {
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
      this._backoff.cancel()
      this._pending.stop()
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
