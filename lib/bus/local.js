'use strict'

/**
 * The bus in single-process mode (`workers: 0`): the process is both the
 * primary and worker 0, sharing one table of listeners and handlers.
 *
 * - broadcast() reaches this process's listeners exactly once, with or without
 *   `self` (the "primary" half receives what the "worker" half sent; there is
 *   no second copy to add).
 * - meta.from is 0 (worker slot 0), meta.generation is 1 (like the handle's).
 * - request() and gather() run this process's handler; gather() answers as
 *   `[{ workerId: 0, pid, result }]`.
 * - send(0 | 'primary') delivers here; any other slot is dropped (returns false).
 * - Broadcasts still go over the Redis bridge when `bus.redis` is set.
 */

const { deliverLater, withTimeout } = require('./core')

const LOCAL_ID = 0
const LOCAL_GENERATION = 1

/**
 * @param {import('./core').BusCore} core
 */
function createLocalTransport (core) {
  function meta (topic) {
    return { topic, from: LOCAL_ID, generation: LOCAL_GENERATION }
  }

  return {
    role: 'local',

    /** @param {'host'|'remote'} [scope] 'host': not over Redis; 'remote': over Redis only */
    broadcast (topic, payload, self, scope) {
      if (scope !== 'remote') process.nextTick(deliverLater, core, topic, payload, meta(topic))
      if (core.bridge && scope !== 'host') core.bridge.publish(topic, payload, LOCAL_ID, LOCAL_GENERATION)
    },

    send (to, topic, payload) {
      if (to !== 'primary' && to !== LOCAL_ID) return false
      process.nextTick(deliverLater, core, topic, payload, meta(topic))
      return true
    },

    request (topic, payload, timeoutMs) {
      return core.invokeLocally(topic, payload, meta(topic), 'this process', timeoutMs, 'bus.request')
    },

    gather (topic, payload, timeoutMs) {
      const answer = core.invoke(topic, payload, meta(topic), `worker ${LOCAL_ID}`)
      return withTimeout(answer, timeoutMs, () => null).then(function one (reply) {
        return core.gatherResult(topic, [{ w: LOCAL_ID, p: process.pid, ok: reply.ok, d: reply.d, e: reply.e }], [])
      }, function timedOut () {
        return core.gatherResult(topic, [], [LOCAL_ID])
      })
    },

    fromBridge (topic, payload, from, generation, host) {
      core.deliver(topic, payload, { topic, from, generation: generation === undefined ? null : generation, host })
    },

    close () {},

    status () {
      return {}
    }
  }
}

module.exports = { createLocalTransport, LOCAL_ID }
