'use strict'

/**
 * The root of the error catalogue: every error clusterize-express creates is
 * a ClusterizeError whose `code` follows ERR_CLUSTERIZE_<AREA>_<WHAT>.
 * docs/errors.md lists every code with its cause and fix; test/errors.test.js
 * keeps that page and the code in step.
 */

/** The base class of every clusterize error: `err instanceof ClusterizeError` tells ours apart. */
class ClusterizeError extends Error {
  /**
   * @param {string} message says what happened and what to do
   * @param {string} code ERR_CLUSTERIZE_<AREA>_<WHAT>, listed in docs/errors.md
   * @param {object} [fields] extra properties copied onto the error; `cause` becomes the standard cause
   */
  constructor (message, code, fields) {
    super(message, fields && fields.cause !== undefined ? { cause: fields.cause } : undefined)
    this.name = new.target.name
    this.code = code
    if (fields) {
      for (const key of Object.keys(fields)) {
        if (key !== 'cause') this[key] = fields[key]
      }
    }
  }
}

/**
 * Thrown at startup when an option is missing, unknown or out of range.
 * The message always names the option and what it accepts.
 */
class ClusterizeOptionError extends ClusterizeError {
  /**
   * @param {string} message
   * @param {string} [option] the option's path, e.g. 'reload.batch'
   */
  constructor (message, option) {
    super(message, 'ERR_CLUSTERIZE_CONFIG_OPTION')
    this.option = option
  }
}

/** Thrown when a request or gather over the bus gets no answer in time. */
class ClusterizeTimeoutError extends ClusterizeError {
  /** @param {string} message */
  constructor (message) {
    super(message, 'ERR_CLUSTERIZE_BUS_TIMEOUT')
  }
}

/**
 * The app cannot be loaded or built (a syntax error, a missing module, a
 * wrong export): every worker would fail the same way, so the first start
 * stops at the first one instead of crash-looping.
 */
class ClusterizeAppError extends ClusterizeError {
  /** @param {string} message */
  constructor (message) {
    super(message, 'ERR_CLUSTERIZE_APP_INVALID')
  }
}

/**
 * Make a listen error say what to do; EADDRINUSE names the port and the option.
 * @param {Error} err
 * @param {number} port
 * @param {{ what: string, option: string }} [about] the port's name and how to set it;
 *   default the app's port (option "port" or PORT)
 * @returns {Error} the same error
 */
function explainListenError (err, port, about) {
  if (err && err.code === 'EADDRINUSE') {
    const what = about ? about.what : 'port'
    const option = about ? about.option : 'option "port" or PORT'
    err.message = `${what} ${port} is already in use (EADDRINUSE): stop the other server or choose another port (${option})`
  }
  return err
}

/**
 * The longest delay a Node timer takes (2^31-1 ms, about 24.8 days): a longer
 * one fires after 1 ms with a TimeoutOverflowWarning. Every time option is
 * bounded by it.
 */
const MAX_TIMER_MS = 2147483647

module.exports = { ClusterizeError, ClusterizeOptionError, ClusterizeTimeoutError, ClusterizeAppError, explainListenError, MAX_TIMER_MS }
