'use strict'

const { ClusterizeError, ClusterizeOptionError } = require('../errors')

/**
 * Errors raised by the offload pool. Every error carries an HTTP `status`
 * (and the `statusCode` alias Express reads), a stable `code`, and `expose`
 * (whether the message is safe to show to a client). Errors that should be
 * answered with a `Retry-After` header also carry `headers`, which Express's
 * default error handler (finalhandler) copies onto the response.
 */

/** Base class of every offload error. */
class OffloadError extends ClusterizeError {
  /**
   * @param {string} message
   * @param {{ status?: number, code?: string, cause?: unknown }} [info]
   */
  constructor (message, info = {}) {
    super(message, info.code || 'ERR_CLUSTERIZE_OFFLOAD_FAILED', info.cause === undefined ? undefined : { cause: info.cause })
    this.status = info.status || 500
    this.statusCode = this.status
    this.expose = this.status < 500
  }
}

/** The queue is full: the client should come back later (503 + Retry-After). */
class QueueFullError extends OffloadError {
  /** @param {number} maxQueue @param {number} retryAfter seconds */
  constructor (maxQueue, retryAfter) {
    super(`offload queue is full (maxQueue ${maxQueue}); retry in ${retryAfter}s`, { status: 503, code: 'ERR_CLUSTERIZE_OFFLOAD_QUEUE_FULL' })
    this.retryAfter = retryAfter
    this.headers = { 'Retry-After': String(retryAfter) }
  }
}

/** A task ran longer than its timeout; its thread was terminated and replaced (503). */
class TaskTimeoutError extends OffloadError {
  /** @param {number} timeoutMs */
  constructor (timeoutMs) {
    super(`offload task timed out after ${timeoutMs} ms; its thread was terminated and replaced`, { status: 503, code: 'ERR_CLUSTERIZE_OFFLOAD_TIMEOUT' })
    this.timeoutMs = timeoutMs
  }
}

/** The task was cancelled through its AbortSignal (or its client disconnected). */
class TaskAbortedError extends OffloadError {
  /** @param {unknown} [reason] */
  constructor (reason) {
    super('offload task was aborted', { status: 499, code: 'ABORT_ERR', cause: reason })
    this.name = 'AbortError'
  }
}

/** The task threw or rejected inside its thread (500, or the task error's own 4xx/5xx status). */
class TaskError extends OffloadError {
  /**
   * @param {{ name?: string, message?: string, stack?: string, code?: unknown, status?: unknown }} remote
   */
  constructor (remote) {
    const status = Number.isInteger(remote.status) && remote.status >= 400 && remote.status <= 599 ? remote.status : 500
    super(String(remote.message), { status, code: typeof remote.code === 'string' ? remote.code : 'ERR_CLUSTERIZE_OFFLOAD_TASK' })
    this.taskErrorName = remote.name || 'Error'
    if (remote.stack) this.stack = `${remote.stack}\n    at <offload thread>`
    this.expose = status < 500
  }
}

/** The thread running the task crashed or exited; the thread was replaced (500). */
class ThreadExitError extends OffloadError {
  /** @param {string} message @param {number|null} exitCode @param {unknown} [cause] */
  constructor (message, exitCode, cause) {
    super(message, { status: 500, code: 'ERR_CLUSTERIZE_OFFLOAD_THREAD_EXIT', cause })
    this.exitCode = exitCode
  }
}

/** Threads fail at startup repeatedly; the pool stopped respawning them (503). */
class ThreadStartupError extends OffloadError {
  /** @param {string} reason @param {unknown} [cause] */
  constructor (reason, cause) {
    super(`offload threads fail at startup, the pool stopped respawning them: ${reason}`, { status: 503, code: 'ERR_CLUSTERIZE_OFFLOAD_THREAD_STARTUP', cause })
  }
}

/** The pool is closing or closed (503). */
class PoolClosedError extends OffloadError {
  constructor (message = 'offload pool is closed') {
    super(message, { status: 503, code: 'ERR_CLUSTERIZE_OFFLOAD_POOL_CLOSED' })
  }
}

/** An argument or result cannot be structured-cloned (500). */
class CloneError extends OffloadError {
  /** @param {string} message @param {number} [position] 1-based argument position, 0 for the result */
  constructor (message, position) {
    super(message, { status: 500, code: 'ERR_CLUSTERIZE_OFFLOAD_CLONE' })
    this.position = position
  }
}

/** An offloaded function refers to a variable of its enclosing scope (500). */
class OuterVariableError extends OffloadError {
  /** @param {string} variable */
  constructor (variable) {
    super(`offloaded functions cannot use outer variables; pass them as arguments (the function uses "${variable}", which is not defined in the thread)`, { status: 500, code: 'ERR_CLUSTERIZE_OFFLOAD_OUTER_VARIABLE' })
    this.variable = variable
  }
}

/** The task is not something the pool can run (500). */
class InvalidTaskError extends OffloadError {
  /** @param {string} message */
  constructor (message) {
    super(message, { status: 500, code: 'ERR_CLUSTERIZE_OFFLOAD_INVALID_TASK' })
  }
}

/** A bad option value; thrown synchronously at creation. A ClusterizeOptionError naming the option. */
class OffloadOptionError extends ClusterizeOptionError {
  /**
   * @param {string} message
   * @param {string} [option]
   */
  constructor (message, option) {
    super(message, option)
    this.name = 'OffloadOptionError'
    this.code = 'ERR_CLUSTERIZE_OFFLOAD_OPTION'
  }
}

module.exports = {
  OffloadError,
  QueueFullError,
  TaskTimeoutError,
  TaskAbortedError,
  TaskError,
  ThreadExitError,
  ThreadStartupError,
  PoolClosedError,
  CloneError,
  OuterVariableError,
  InvalidTaskError,
  OffloadOptionError
}
