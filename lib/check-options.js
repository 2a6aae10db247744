'use strict'

/**
 * The one validation toolkit for every option clusterize takes (the
 * clusterize() options, offload() and session()). Each error is a
 * ClusterizeOptionError (or a subclass) that names the option, says what
 * it accepts and what it got.
 */

const { ClusterizeOptionError, MAX_TIMER_MS } = require('./errors')

/** How a bad value is shown in a message. */
function describe (value) {
  if (typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'function') return 'a function'
  if (Array.isArray(value)) return 'an array'
  if (value === null) return 'null'
  if (typeof value === 'object') return 'an object'
  return String(value)
}

/**
 * Checks whose errors read `<prefix>: option "<name>" must be <accepted>, got <value>`.
 * @param {string} prefix 'clusterize', 'offload', 'session'...
 * @param {typeof ClusterizeOptionError} [ErrorClass] a ClusterizeOptionError subclass
 */
function createChecks (prefix, ErrorClass) {
  const OptionError = ErrorClass || ClusterizeOptionError

  /** @returns {ClusterizeOptionError} to throw */
  function fail (option, accepted, value) {
    return new OptionError(`${prefix}: option "${option}" must be ${accepted}, got ${describe(value)}`, option)
  }

  function integer (option, value, min, max) {
    if (!Number.isInteger(value) || value < min || (max !== undefined && value > max)) {
      throw fail(option, max === undefined ? `an integer >= ${min}` : `an integer from ${min} to ${max}`, value)
    }
    return value
  }

  function number (option, value, min, max) {
    if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
      throw fail(option, `a number from ${min} to ${max}`, value)
    }
    return value
  }

  /** A delay a Node timer can hold: an integer from `min` to 2^31-1 ms. */
  function timerMs (option, value, min) {
    return integer(option, value, min, MAX_TIMER_MS)
  }

  function oneOf (option, value, accepted) {
    if (!accepted.includes(value)) throw fail(option, 'one of ' + accepted.map((v) => `'${v}'`).join(', '), value)
    return value
  }

  function boolean (option, value) {
    if (typeof value !== 'boolean') throw fail(option, 'true or false', value)
    return value
  }

  /** Merge a nested option group over its defaults, refusing unknown keys. */
  function group (name, value, defaults) {
    if (value === undefined || value === null) return Object.assign({}, defaults)
    if (typeof value !== 'object' || Array.isArray(value)) throw fail(name, 'an object', value)
    for (const key of Object.keys(value)) {
      if (!(key in defaults)) {
        throw new OptionError(`${prefix}: unknown option "${name}.${key}" (accepted: ${Object.keys(defaults).join(', ')})`, `${name}.${key}`)
      }
    }
    const merged = Object.assign({}, defaults)
    for (const key of Object.keys(value)) {
      if (value[key] !== undefined) merged[key] = value[key]
    }
    return merged
  }

  return { fail, integer, number, timerMs, oneOf, boolean, group, describe }
}

module.exports = { createChecks, describe }
