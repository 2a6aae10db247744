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

module.exports = { ClusterizeOptionError, ClusterizeTimeoutError }
