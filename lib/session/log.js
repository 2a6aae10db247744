'use strict'

/**
 * The logger the session stores write through: the runtime's (the `logger`
 * option) once a clusterize worker or single process has started, else the
 * default readable lines on stderr (session() used without clusterize()).
 */

const { createLogger } = require('../logger')

let current = null

/**
 * Route session log lines through the runtime's logger.
 * @param {{ info: Function, warn: Function, error: Function }} log from lib/logger.js
 */
function useSessionLogger (log) {
  current = log
}

/** @returns {{ info: Function, warn: Function, error: Function }} */
function sessionLogger () {
  if (current === null) current = createLogger(undefined, '')
  return current
}

module.exports = { useSessionLogger, sessionLogger }
