'use strict'

/**
 * How the primary asks a worker to go: drain within a deadline (the worker
 * enforces it; a SIGKILL here is the backstop), or a kill at once. Either
 * way the worker stops being ready first ('record:unready'), and the first
 * reason given is the one its exit is told with.
 */

const protocol = require('../protocol')
const { STATES } = require('./worker-record')

/** The backstop waits this much longer than the worker's own drain deadline. */
const BACKSTOP_GRACE_MS = 2000

/**
 * @param {{ log: object, emit: Function }} supervisor
 * @param {import('./worker-record').WorkerRecord} record
 * @param {string} reason 'shutdown' stops it; anything else (reload, recycle, upgrade) drains it
 * @param {number} timeoutMs the drain deadline
 * @returns {Promise<object>} its exit event
 */
function drainOrKill (supervisor, record, reason, timeoutMs) {
  if (record.isExited()) return record.exited
  if (!record.retireReason) record.retireReason = reason
  if (record.isRetiring()) return record.exited
  record.state = reason === 'shutdown' ? STATES.STOPPING : STATES.DRAINING
  record.drainAsked = true
  supervisor.emit('record:unready', record)
  if (!record.channel.postNow(protocol.drain(timeoutMs, reason))) {
    record.worker.process.kill('SIGKILL')
  }
  const timer = setTimeout(function drainBackstop () {
    if (record.isExited()) return
    supervisor.log.warn(`worker ${record.id} did not drain within ${timeoutMs} ms, killing it`, { pid: record.pid })
    record.forced = true
    record.worker.process.kill('SIGKILL')
  }, timeoutMs + BACKSTOP_GRACE_MS)
  timer.unref()
  record.exited.then(() => clearTimeout(timer))
  return record.exited
}

/**
 * @param {{ emit: Function }} supervisor
 * @param {import('./worker-record').WorkerRecord} record
 * @param {string} reason
 * @param {string} [detail] why, for the crash-loop breaker's message (a hang)
 * @returns {Promise<object>} its exit event
 */
function killNow (supervisor, record, reason, detail) {
  if (record.isExited()) return record.exited
  if (!record.retireReason) {
    record.retireReason = reason
    record.retireDetail = detail || null
  }
  record.state = STATES.STOPPING
  supervisor.emit('record:unready', record)
  record.worker.process.kill('SIGKILL')
  return record.exited
}

module.exports = { drainOrKill, killNow }
