'use strict'

/**
 * Thrown at startup when an option is missing, unknown or out of range.
 * The message always names the option and what it accepts.
 */
class ClusterizeOptionError extends TypeError {
  constructor (message, option) {
    super(message)
    this.name = 'ClusterizeOptionError'
    this.code = 'ERR_CLUSTERIZE_OPTION'
    this.option = option
  }
}

/** Thrown when a request or gather over the bus gets no answer in time. */
class ClusterizeTimeoutError extends Error {
  constructor (message) {
    super(message)
    this.name = 'ClusterizeTimeoutError'
    this.code = 'ERR_CLUSTERIZE_TIMEOUT'
  }
}

/**
 * Make a listen error say what to do; EADDRINUSE names the port and the option.
 * @param {Error} err
 * @param {number} port
 * @returns {Error} the same error
 */
function explainListenError (err, port) {
  if (err && err.code === 'EADDRINUSE') {
    err.message = `port ${port} is already in use (EADDRINUSE): stop the other server or choose another port (option "port" or PORT)`
  }
  return err
}

/**
 * The longest delay a Node timer takes (2^31-1 ms, about 24.8 days): a longer
 * one fires after 1 ms with a TimeoutOverflowWarning. Every time option is
 * bounded by it.
 */
const MAX_TIMER_MS = 2147483647

module.exports = { ClusterizeOptionError, ClusterizeTimeoutError, explainListenError, MAX_TIMER_MS }
