'use strict'

/**
 * The thread lifecycle half of Pool: start threads, notice them ready,
 * replace one that crashed, timed out or was aborted, back off when threads
 * keep failing at startup, retire them. Each thread is a PoolThread
 * (./thread.js); Pool (./index.js) extends this class and owns every field
 * used here.
 */

const debug = require('debug')('clusterize:pool')
const { TaskTimeoutError, ThreadStartupError } = require('./errors')
const { removeItem } = require('./records')
const { PoolThread } = require('./thread')

class PoolThreads {
  /** Bind the handlers every thread's events go to (once per pool, not per thread). */
  _bindThreadEvents () {
    this._onReady = this._onReady.bind(this)
    this._onDone = this._onDone.bind(this)
    this._onTimeout = this._onTimeout.bind(this)
    this._onStartupFailure = this._onStartupFailure.bind(this)
    this._onThreadExit = this._onThreadExit.bind(this)
  }

  _onTimeout (th, t) {
    this._counters.timedOut++
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
    this._counters.replaced++
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
    this._startupFailures = 0
    this._next(th)
  }

  _onThreadExit (th, t, code) {
    this._forget(th)
    if (t !== null) {
      this._busy--
      this._counters.failed++
      this._counters.crashed++
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
