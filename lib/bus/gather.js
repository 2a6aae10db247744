'use strict'

/**
 * Gathers in the primary: ask every ready worker's handler for a topic and
 * settle with the answers, the workers that exited (an error entry each, at
 * once) and those still missing when the timeout passes. A stuck worker is
 * not asked: it gets an error entry at once instead of a silent wait.
 */

const { bus: busMessage } = require('../protocol')
const { queuedSize } = require('./codec')

/**
 * @param {object} options
 * @param {import('./core').BusCore} options.core
 * @param {Set<object>} options.records the primary transport's worker records
 * @param {(record: object) => boolean} options.isTarget is this record asked (a ready worker)?
 * @param {(record: object) => boolean} options.isStuck
 * @param {(record: object, message: object) => void} options.post
 * @param {() => void} options.onSkipped a stuck worker was not asked (counted as a drop)
 */
function createGathers (options) {
  const { core, records, isTarget, isStuck, post, onSkipped } = options
  /** @type {Map<number, object>} gathers in flight, by primary-side id */
  const gathers = new Map()
  let nextGatherId = 1

  /**
   * Ask every ready worker's handler; settle with `(answers, missing)` when
   * all have answered, exited, or the timeout passes.
   */
  function start (topic, payload, timeoutMs, from, generation, settle) {
    const id = nextGatherId++
    const state = { id, topic, pending: new Set(), answers: [], timer: null, settle }
    for (const record of records) {
      if (isTarget(record)) state.pending.add(record)
    }
    if (state.pending.size === 0) {
      settle([], [])
      return
    }
    gathers.set(id, state)
    const message = busMessage.handlerAsk(id, topic, payload, from, generation)
    for (const record of Array.from(state.pending)) {
      if (!isStuck(record)) {
        record.channel.reserve(queuedSize(topic, payload))
        post(record, message)
        continue
      }
      // Not asked (it reads nothing): an error entry now, not a silent wait until the timeout.
      onSkipped()
      state.pending.delete(record)
      state.answers.push({
        w: record.id,
        p: record.pid,
        ok: false,
        e: { message: `worker ${record.id} (pid ${record.pid}) was not asked "${topic}": it is stuck (it read none of its bus messages for bus.stallTimeoutMs)`, code: 'ERR_CLUSTERIZE_BUS_BACKPRESSURE' }
      })
    }
    if (state.pending.size === 0) {
      finish(state)
      return
    }
    state.timer = setTimeout(finish, timeoutMs, state)
  }

  function finish (state) {
    if (!gathers.has(state.id)) return
    gathers.delete(state.id)
    clearTimeout(state.timer)
    const missing = []
    for (const record of state.pending) missing.push(record.id)
    state.settle(state.answers, missing)
  }

  /** A worker's HANDLER_REPLY. */
  function answer (record, message) {
    const state = gathers.get(message.id)
    if (state === undefined || !state.pending.has(record)) return
    state.pending.delete(record)
    const entry = { w: record.id, p: record.pid, ok: message.ok === true }
    if (entry.ok && core.acceptsPayload(message.d)) {
      entry.d = message.d
    } else if (entry.ok) {
      entry.ok = false
      entry.e = { message: `worker ${record.id} sent a malformed answer`, code: 'ERR_CLUSTERIZE_BUS_DECODE' }
    } else {
      entry.e = message.e && typeof message.e === 'object' ? message.e : { message: 'unknown error' }
    }
    state.answers.push(entry)
    if (state.pending.size === 0) finish(state)
  }

  /** A worker exited: the gathers waiting on it count it as failed at once. */
  function workerExited (record) {
    for (const state of Array.from(gathers.values())) {
      if (!state.pending.has(record)) continue
      state.pending.delete(record)
      state.answers.push({
        w: record.id,
        p: record.pid,
        ok: false,
        e: { message: `worker ${record.id} (pid ${record.pid}) exited before answering "${state.topic}"`, code: 'ERR_CLUSTERIZE_WORKER_EXIT' }
      })
      if (state.pending.size === 0) finish(state)
    }
  }

  return {
    start,
    answer,
    workerExited,
    /** Shutdown: settle every gather with what it has. */
    close () {
      for (const state of Array.from(gathers.values())) finish(state)
    },
    get size () { return gathers.size }
  }
}

module.exports = { createGathers }
