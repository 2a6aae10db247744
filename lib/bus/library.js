'use strict'

/**
 * The library's own pub/sub (the socket.io adapter's cluster messages, the
 * recovery service's deliveries and cross-host forwards): the bus's relay,
 * flow control and Redis bridge, but not the app's topics. Its topics travel
 * with a mark no app topic may carry (codec.LIBRARY_MARK), so a library topic
 * and an app topic of the same name never meet, and the app's bus never sees
 * the library's messages. Internal: not exported from the package.
 */

const { LIBRARY_MARK, checkTopic } = require('./codec')
const { busRuntime } = require('./runtime')
const { transportFor } = require('./index')

const core = busRuntime.core

function wireTopic (name, method) {
  checkTopic(name, method)
  return LIBRARY_MARK + name
}

/**
 * broadcast()'s `scope`: undefined (every host), 'host' (this host's
 * workers and listeners, not over Redis) or 'remote' (over Redis to the other
 * hosts only). Only the primary and the single process choose.
 */
function checkScope (scope, transport) {
  if (scope === undefined) return undefined
  if (scope !== 'host' && scope !== 'remote') throw new TypeError(`libraryChannel.broadcast: scope must be 'host' or 'remote', got ${String(scope)}`)
  if (transport.role === 'worker') throw new TypeError('libraryChannel.broadcast: scope is for the primary (a worker\'s broadcast goes through it)')
  return scope
}

const libraryChannel = {
  /**
   * @param {string} name a library topic
   * @param {(data: *, meta: object) => void} handler
   */
  on: function on (name, handler) {
    core.addListener(wireTopic(name, 'libraryChannel.on'), handler, false, 'libraryChannel.on')
  },

  /** @param {string} name @param {Function} [handler] */
  off: function off (name, handler) {
    core.removeListener(LIBRARY_MARK + name, handler)
  },

  /**
   * To every worker (and, with bus.redis, every host) and the primary's
   * listeners, like bus.broadcast(); throws as it does.
   * @param {string} name
   * @param {*} data
   * @param {{ self?: boolean, scope?: 'host'|'remote' }} [options]
   */
  broadcast: function broadcast (name, data, options) {
    const topic = wireTopic(name, 'libraryChannel.broadcast')
    const transport = transportFor('libraryChannel.broadcast')
    const scope = options ? checkScope(options.scope, transport) : undefined
    // Only for the other hosts, and there is no Redis bridge to them: nothing to encode or send.
    if (scope === 'remote' && core.bridge === null) return
    transport.broadcast(topic, core.codec.encode(name, data), Boolean(options && options.self), scope)
  }
}

module.exports = { libraryChannel }
