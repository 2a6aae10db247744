'use strict'

/**
 * Errors raised by the bus. Every message names the topic and says what to do.
 */

const { ClusterizeError, ClusterizeTimeoutError } = require('../errors')

/** A bus call that cannot be carried out: bad topic, too large, unserialisable, not started. */
class ClusterizeBusError extends ClusterizeError {}

/**
 * Rebuild an error that travelled over IPC or Redis as `{ message, name, code }`.
 * @param {*} wire
 * @param {string} fallback message when the wire form is unusable
 * @returns {Error}
 */
function errorFromWire (wire, fallback) {
  const message = wire && typeof wire.message === 'string' ? wire.message : fallback
  const error = ownError(wire, message)
  if (wire && typeof wire.name === 'string' && wire.name !== 'Error') error.name = wire.name
  if (wire && (typeof wire.code === 'string' || typeof wire.code === 'number')) error.code = wire.code
  if (wire && typeof wire.status === 'number') error.status = wire.status
  error.remote = true
  return error
}

/**
 * A code of ours gets its class back on this side, so that
 * `instanceof ClusterizeError` holds for errors that crossed a process.
 */
function ownError (wire, message) {
  const code = wire && wire.code
  if (code === 'ERR_CLUSTERIZE_BUS_TIMEOUT') return new ClusterizeTimeoutError(message)
  if (typeof code === 'string' && (code.startsWith('ERR_CLUSTERIZE_BUS_') || code === 'ERR_CLUSTERIZE_WORKER_EXIT')) return new ClusterizeBusError(message, code)
  if (typeof code === 'string' && code.startsWith('ERR_CLUSTERIZE_')) return new ClusterizeError(message, code)
  return new Error(message)
}

/**
 * The part of an error that crosses a process boundary.
 * @param {*} err
 * @returns {{ message: string, name?: string, code?: string|number, status?: number }}
 */
function errorToWire (err) {
  if (err instanceof Error) {
    const wire = { message: err.message, name: err.name }
    if (typeof err.code === 'string' || typeof err.code === 'number') wire.code = err.code
    if (typeof err.status === 'number') wire.status = err.status
    return wire
  }
  return { message: typeof err === 'string' ? err : `non-Error thrown: ${safeString(err)}` }
}

function safeString (value) {
  try {
    return String(value)
  } catch {
    return typeof value
  }
}

module.exports = { ClusterizeBusError, errorFromWire, errorToWire }
