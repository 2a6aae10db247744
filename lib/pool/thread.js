'use strict'

/**
 * One pool thread, as piscina's WorkerInfo: it owns its worker_threads Worker,
 * the task it runs, its timeout timer and its state, and it alone speaks the
 * pool's message protocol (./messages.js) to the thread. It knows nothing of
 * the queue or of other threads; it tells its pool what happened through
 * events, and the pool decides.
 *
 * States: starting -> idle <-> busy -> retiring. retiring is final: the
 * thread was terminated, or exited, and reports nothing more.
 *
 * Events (each gets the PoolThread first):
 * - 'ready' (thread): it started and is idle
 * - 'done' (thread, task, ok, value): the task finished; value is its result or an Error
 * - 'timeout' (thread, task): the running task passed its deadline; the thread still runs it
 * - 'startupFailure' (thread, reason, code): it exited before it was ready
 * - 'exit' (thread, task, code): it exited on its own after it was ready; task is
 *   the one it was running, or null
 */

const path = require('node:path')
const EventEmitter = require('node:events')
const { Worker } = require('node:worker_threads')
const { performance } = require('node:perf_hooks')
const { ThreadExitError } = require('./errors')
const { remoteError } = require('./records')
const { TASK, RESULT, STATUS, READY } = require('./messages')

const THREAD_MAIN = path.join(__dirname, 'thread-main.js')
/** Task definitions a thread caches before it is told to forget them all. */
const MAX_KNOWN_PER_THREAD = 4096
const now = performance.now.bind(performance)
const noop = () => {}

const STATE = Object.freeze({ STARTING: 'starting', IDLE: 'idle', BUSY: 'busy', RETIRING: 'retiring' })

class PoolThread extends EventEmitter {
  /**
   * Start a thread.
   * @param {number} id
   * @param {{ setup?: unknown, niceness?: number, resourceLimits?: object }} options the pool's normalized options
   */
  constructor (id, options) {
    super()
    this.id = id
    this.state = STATE.STARTING
    /** @type {object|null} the Task it runs (./records.js) */
    this.task = null
    /** The last 'error' the Worker reported: why it exited. */
    this.error = null
    this._known = new Set()
    // one message array reused for every task: no allocation per dispatch
    this._msg = [0, undefined, undefined, false]
    this._timer = null
    this._timerAt = 0
    this._exited = false
    this._onTimer = this._onTimer.bind(this)
    const worker = new Worker(THREAD_MAIN, {
      workerData: { setup: options.setup, niceness: options.niceness },
      resourceLimits: options.resourceLimits
    })
    this.worker = worker
    worker.unref()
    worker.on('message', (msg) => this._onMessage(msg))
    worker.on('error', (err) => { this.error = err })
    worker.on('exit', (code) => this._onExit(code))
  }

  /** @returns {boolean} true until it reported ready (or exited trying) */
  get starting () { return this.state === STATE.STARTING }
  /** @returns {boolean} true once terminated or exited */
  get retiring () { return this.state === STATE.RETIRING }

  /**
   * Send `t` to this idle thread and arm its deadline. Sets `t.thread` and
   * `t.startedAt`. Throws what postMessage threw (an argument that cannot be
   * cloned); the thread then stays idle and unchanged.
   * @param {object} t a Task (./records.js)
   */
  run (t) {
    const entry = t.entry
    const msg = this._msg
    const known = this._known
    let isNew = false
    msg[TASK.ENTRY] = entry.id
    msg[TASK.ARGS] = t.args
    msg[TASK.TRACE] = t.trace
    if (known.has(entry.id)) {
      msg[TASK.DEF] = undefined
    } else {
      if (known.size >= MAX_KNOWN_PER_THREAD) {
        known.clear()
        msg[TASK.FLUSH] = true
      }
      msg[TASK.DEF] = entry.def
      known.add(entry.id)
      isNew = true
    }
    try {
      this.worker.postMessage(msg, t.transfer)
    } catch (err) {
      if (isNew) known.delete(entry.id)
      msg[TASK.ARGS] = msg[TASK.DEF] = undefined
      throw err
    }
    msg[TASK.ARGS] = msg[TASK.DEF] = msg[TASK.TRACE] = undefined
    msg[TASK.FLUSH] = false
    const startedAt = now()
    t.startedAt = startedAt
    t.thread = this
    this.task = t
    this.state = STATE.BUSY
    if (t.timeoutMs > 0) this._armTimer(startedAt + t.timeoutMs, t.timeoutMs)
  }

  /**
   * Terminate the thread; it reports nothing more. Idempotent.
   * @returns {object|null} the task it was running (now the caller's to settle), or null
   */
  retire () {
    const t = this.task
    this.task = null
    if (this.state === STATE.RETIRING) return t
    this.state = STATE.RETIRING
    this._clearTimer()
    this.worker.terminate().catch(noop)
    return t
  }

  /**
   * @returns {Promise<void>} resolves once the Worker has exited
   */
  exited () {
    if (this._exited) return Promise.resolve()
    return new Promise((resolve) => this.worker.once('exit', () => resolve()))
  }

  /**
   * Why it exited, for messages: its error, or its exit code.
   * @param {number} code
   * @returns {string}
   */
  exitReason (code) {
    return this.error ? this.error.message : `exit code ${code}`
  }

  _onMessage (msg) {
    const state = this.state
    if (state === STATE.BUSY) {
      const t = this.task
      this.task = null
      this.state = STATE.IDLE
      // the deadline timer stays armed: it re-checks the next task's deadline
      // when it fires, which is cheaper than clearing and arming one per task
      if (msg[RESULT.STATUS] === STATUS.OK) this.emit('done', this, t, true, msg[RESULT.VALUE])
      else this.emit('done', this, t, false, remoteError(msg[RESULT.VALUE]))
    } else if (state === STATE.STARTING && msg === READY) {
      this.state = STATE.IDLE
      this.emit('ready', this)
    }
  }

  _onExit (code) {
    this._exited = true
    const state = this.state
    if (state === STATE.RETIRING) return
    this.state = STATE.RETIRING
    this._clearTimer()
    if (state === STATE.STARTING) return this.emit('startupFailure', this, this.exitReason(code), code)
    const t = this.task
    this.task = null
    this.emit('exit', this, t, code)
  }

  /**
   * The error a task gets when its thread died under it.
   * @param {number} code
   * @returns {ThreadExitError}
   */
  crashError (code) {
    const message = this.error
      ? `offload thread crashed while running the task: ${this.error.message}`
      : `offload thread exited with code ${code} while running the task`
    return new ThreadExitError(message, code, this.error || undefined)
  }

  _armTimer (deadline, delay) {
    if (this._timer !== null) {
      if (this._timerAt <= deadline) return // fires earlier and re-checks
      clearTimeout(this._timer)
    }
    this._timerAt = deadline
    this._timer = setTimeout(this._onTimer, Math.max(1, Math.ceil(delay)))
    this._timer.unref()
  }

  _clearTimer () {
    if (this._timer !== null) clearTimeout(this._timer)
    this._timer = null
  }

  _onTimer () {
    this._timer = null
    const t = this.task
    if (this.state !== STATE.BUSY || t.timeoutMs <= 0) return
    const deadline = t.startedAt + t.timeoutMs
    const remaining = deadline - now()
    if (remaining > 1) return this._armTimer(deadline, remaining)
    this.emit('timeout', this, t)
  }
}

module.exports = { PoolThread, STATE }
