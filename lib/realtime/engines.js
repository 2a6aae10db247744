'use strict'

/**
 * The engine.io servers of this process (socket.io's `io.engine`), so that
 * a draining worker can close their sessions through engine.io's own
 * close(): a long-polling client's pending GET is then answered with a
 * close packet at once, instead of being an in-flight request that holds
 * the drain until its deadline (the client cannot send its own close: the
 * primary no longer routes new connections to this worker).
 */

const debug = require('debug')('clusterize:socket.io')

const engines = new Set()

/**
 * @param {object} engine an engine.io Server
 * @returns {() => void} forgets it
 */
function registerEngine (engine) {
  engines.add(engine)
  return function forgetEngine () { engines.delete(engine) }
}

/**
 * Close every session of every registered engine.io server (drain). A
 * failure in one engine does not keep the others open.
 * @returns {number} how many sessions were open
 */
function closeEngines () {
  let sessions = 0
  for (const engine of engines) {
    sessions += typeof engine.clientsCount === 'number' ? engine.clientsCount : 0
    try {
      engine.close()
    } catch (err) {
      debug('closing an engine.io server failed: %s', err && err.message)
    }
  }
  engines.clear()
  if (sessions > 0) debug('closed %d engine.io sessions', sessions)
  return sessions
}

module.exports = { registerEngine, closeEngines }
