'use strict'

/**
 * The pool's own small protocol between a pool and its threads, named.
 * Messages are positional arrays reused per thread (no allocation per task):
 *   to a thread:   [TASK.ENTRY] entry id, [TASK.ARGS] args, [TASK.DEF] the task's
 *                  definition the first time this thread sees it, [TASK.FLUSH] true
 *                  to forget every cached task first, [TASK.TRACE] the caller's active
 *                  OpenTelemetry span context, or undefined (../telemetry.js)
 *   from a thread: READY once it started; then [RESULT.STATUS] OK or FAILED, [RESULT.VALUE]
 */

const TASK = Object.freeze({ ENTRY: 0, ARGS: 1, DEF: 2, FLUSH: 3, TRACE: 4 })
const RESULT = Object.freeze({ STATUS: 0, VALUE: 1 })
const STATUS = Object.freeze({ OK: 0, FAILED: 1 })
const READY = 'ready'

module.exports = { TASK, RESULT, STATUS, READY }
