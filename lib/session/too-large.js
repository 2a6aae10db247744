'use strict'

/**
 * A session too big to store: not an outage (retrying will not help), so
 * HTTP status 413 and no Retry-After, with the size, the limit and the option
 * that sets it.
 */

const { SessionHttpError } = require('./http-error')

const CODE = 'ERR_CLUSTERIZE_SESSION_TOO_LARGE'

class SessionTooLargeError extends SessionHttpError {
  /**
   * @param {string} message says the size, the limit and the option
   * @param {{ size?: number, limit?: number, option?: string, cause?: Error }} [details]
   */
  constructor (message, details) {
    super(message, { name: 'SessionTooLargeError', code: CODE, status: 413, cause: details && details.cause })
    this.size = details && details.size
    this.limit = details && details.limit
    this.option = details && details.option
  }
}

/**
 * @param {number} size bytes of the session as JSON
 * @param {number} limit
 * @param {string} option the option that sets the limit
 * @param {string} [where='session option'] whose option it is
 * @returns {SessionTooLargeError}
 */
function sessionTooLarge (size, limit, option, where) {
  return new SessionTooLargeError(
    `session too large: it is ${size} bytes as JSON, over the limit of ${limit} bytes (${where || 'session option'} ${option}); ` +
    'it was not stored. Keep large data out of the session (store an id, keep the data in a database), or raise ' + option + '.',
    { size, limit, option })
}

module.exports = { SessionTooLargeError, sessionTooLarge, CODE }
