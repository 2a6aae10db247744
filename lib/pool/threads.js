'use strict'

/**
 * The thread lifecycle half of Pool: start threads, notice them ready,
 * replace one that crashed, timed out or was aborted, back off when threads
 * keep failing at startup, retire them. Pool (./index.js) extends it and owns
 * every field used here.
 */

const path = require('node:path')
const { Worker } = require('node:worker_threads')
const { performance } = require('node:perf_hooks')
const debug = require('debug')('clusterize:pool')
const { TaskTimeoutError, ThreadExitError, ThreadStartupError } = require('./errors')
const { Thread, removeItem } = require('./records')

const THREAD_MAIN = path.join(__dirname, 'thread-main.js')
const now = performance.now.bind(performance)
const noop = () => {}

class PoolThreads {
  _armTimer (th, deadline, delay) {
    if (th.timer !== null) {
      if (th.timerAt <= deadline) return // fires earlier and re-checks
      clearTimeout(th.timer)
    }
    th.timerAt = deadline
    th.timer = setTimeout(this._onTimer, Math.max(1, Math.ceil(delay)), th)
    th.timer.unref()
  }

  _onTimer (th) {
    th.timer = null
    const t = th.task
    if (t === null || t.timeoutMs <= 0 || th.retiring) return
    const deadline = t.startedAt + t.timeoutMs
    const remaining = deadline - now()
    if (remaining > 1) return this._armTimer(th, deadline, remaining)
    this._counters.timedOut++
    debug('pool %d: task timed out after %d ms on thread %d, replacing it', this.id, t.timeoutMs, th.id)
    this._killRunning(th, new TaskTimeoutError(t.timeoutMs))
  }

  /** Reject the running task of `th`, terminate the thread and start a replacement. */
  _killRunning (th, err) {
    const t = th.task
    th.task = null
    this._busy--
    this._retire(th)
    this._settle(t, false, err)
    this._replace()
  }

  _retire (th) {
    if (!th.ready) this._starting--
    th.retiring = true
    if (th.timer !== null) clearTimeout(th.timer)
    th.timer = null
    removeItem(this._threads, th)
    removeItem(this._idle, th)
    th.worker.terminate().catch(noop)
  }

  _replace () {
    if (this._closed) return
    this._counters.replaced++
    this._spawn()
  }

  _spawn () {
    const th = new Thread(this._nextThreadId++, null)
    const worker = new Worker(THREAD_MAIN, {
      workerData: { setup: this.options.setup, niceness: this.options.niceness },
      resourceLimits: this.options.resourceLimits
    })
    th.worker = worker
    worker.unref()
    worker.on('message', (msg) => this._onMessage(th, msg))
    worker.on('error', (err) => { th.error = err })
    worker.on('exit', (code) => this._onExit(th, code))
    this._threads.push(th)
    this._starting++
    return th
  }

  _onReady (th) {
    if (th.ready || th.retiring) return
    th.ready = true
    this._starting--
    this._startupFailures = 0
    this._next(th)
  }

  _onExit (th, code) {
    if (th.retiring) return
    if (!th.ready) this._starting--
    th.retiring = true
    if (th.timer !== null) clearTimeout(th.timer)
    removeItem(this._threads, th)
    removeItem(this._idle, th)
    const reason = th.error ? th.error.message : `exit code ${code}`
    if (!th.ready) return this._onStartupFailure(th, reason, code)
    const t = th.task
    if (t !== null) {
      th.task = null
      this._busy--
      this._counters.failed++
      this._counters.crashed++
      const message = th.error
        ? `offload thread crashed while running the task: ${th.error.message}`
        : `offload thread exited with code ${code} while running the task`
      debug('pool %d: thread %d died running a task (%s), replacing it', this.id, th.id, reason)
      this._settle(t, false, new ThreadExitError(message, code, th.error || undefined))
    } else {
      debug('pool %d: idle thread %d exited (%s), replacing it', this.id, th.id, reason)
    }
    this._replace()
  }

  _onStartupFailure (th, reason, code) {
    if (this._closed) return
    this._startupFailures++
    debug('pool %d: thread %d failed at startup (%d in a row): %s', this.id, th.id, this._startupFailures, reason)
    if (this._startupFailures >= this.options.maxStartupFailures) {
      this._broken = new ThreadStartupError(reason, th.error || undefined)
      this._broken.exitCode = code
      if (this._threads.length === 0) this._rejectQueued(this._broken)
      return
    }
    const delay = 50 * 2 ** (this._startupFailures - 1)
    this._respawnTimer = setTimeout(() => {
      this._respawnTimer = null
      if (!this._closed) this._spawn()
    }, delay)
    this._respawnTimer.unref()
  }

  _rejectQueued (err) {
    while (this._queue.length > 0) {
      const t = this._queue.shift()
      if (t.done) continue
      this._queued--
      this._settle(t, false, err)
    }
    this._queued = 0
  }
}

module.exports = { PoolThreads }
