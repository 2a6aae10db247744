'use strict'

/**
 * What the pool keeps per task (a thread is a PoolThread, ./thread.js), and how a thread's error
 * report becomes an Error in the caller.
 */

const { TaskError, CloneError, OuterVariableError } = require('./errors')

/** One queued or running task. */
class Task {
  constructor (entry, args, transfer, timeoutMs, signal, terminateOnAbort, resolve, reject) {
    this.entry = entry
    this.args = args
    this.transfer = transfer
    this.timeoutMs = timeoutMs
    this.signal = signal
    this.terminateOnAbort = terminateOnAbort
    this.resolve = resolve
    this.reject = reject
    this.enqueuedAt = 0
    this.startedAt = 0
    this.thread = null
    this.done = false
    this.onAbort = null
    /** The caller's active OpenTelemetry span context, or undefined (../telemetry.js). */
    this.trace = undefined
  }

  /**
   * Resolve or reject the caller's promise, once; stop listening to its signal.
   * @returns {boolean} false if it was already settled
   */
  settle (ok, value) {
    if (this.done) return false
    this.done = true
    if (this.onAbort !== null) this.signal.removeEventListener('abort', this.onAbort)
    this.signal = null
    this.onAbort = null
    if (ok) this.resolve(value)
    else this.reject(value)
    return true
  }
}

function remoteError (info) {
  if (info.outerVariable) return new OuterVariableError(info.outerVariable)
  if (info.clone) return new CloneError(info.message, 0)
  return new TaskError(info)
}

function removeItem (list, item) {
  const i = list.indexOf(item)
  if (i !== -1) list.splice(i, 1)
}

module.exports = { Task, remoteError, removeItem }
