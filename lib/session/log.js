'use strict'

/**
 * The logger session() writes through: the runtime's (the `logger` option of
 * clusterize()) once the worker or single process has started, else the
 * library's default stderr sink (a plain `node app.js` with no clusterize()).
 */

const { createLogger } = require('../logger')

let current = null

/**
 * @param {{ warn: Function, error: Function, info: Function, debug: Function }} log the internal logger
 */
function setSessionLogger (log) {
  current = log
}

/** @returns {{ warn: Function, error: Function, info: Function, debug: Function }} */
function sessionLog () {
  if (current === null) current = createLogger(undefined, '')
  return current
}

module.exports = { setSessionLogger, sessionLog }
