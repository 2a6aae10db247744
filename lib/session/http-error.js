'use strict'

const { ClusterizeError } = require('../errors')

/**
 * The base of the session errors a client sees: an Error with the HTTP
 * status express's error handler and ours answer with (`expose`: its message
 * is safe to show).
 */
class SessionHttpError extends ClusterizeError {
  /**
   * @param {string} message
   * @param {{ name: string, code: string, status: number, cause?: Error }} details
   */
  constructor (message, details) {
    super(message, details.code, details.cause ? { cause: details.cause } : undefined)
    this.name = details.name
    this.status = details.status
    this.statusCode = details.status
    this.expose = true
  }
}

module.exports = { SessionHttpError }
