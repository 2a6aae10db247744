'use strict'

/**
 * The two ways the `clusterize` command fails, each with its exit code.
 */

const { ClusterizeError } = require('../errors')

/** A usage mistake: printed with a hint to --help, exit code 2. */
class CliUsageError extends ClusterizeError {
  /** @param {string} message names the flag and what it accepts */
  constructor (message) {
    super(message, 'ERR_CLUSTERIZE_CLI_USAGE')
    this.exitCode = 2
  }
}

/** A failure to report on stderr with exit code 1 (no primary running, no answer). */
class CliRuntimeError extends ClusterizeError {
  /** @param {string} message */
  constructor (message) {
    super(message, 'ERR_CLUSTERIZE_CLI_FAILED')
    this.exitCode = 1
  }
}

module.exports = { CliUsageError, CliRuntimeError }
