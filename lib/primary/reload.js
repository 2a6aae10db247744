'use strict'

/**
 * Rolling reload with a canary while baking: one worker of the new
 * generation must come up (listen, report ready, send a heartbeat) and then
 * stay up for `reload.bakeMs` while it serves, its predecessor kept
 * alive beside it. If it fails in that time, the predecessor serves again and
 * nothing else was touched: the reload is rolled back. Then the rest are
 * replaced `batch` at a time, each new worker ready before its old one
 * drains; a new-generation worker that fails during that phase stops the
 * rollout (the slots not yet replaced keep the old generation).
 *
 * Recycling one worker (memory limit) is the same step for one slot.
 */

const debug = require('debug')('clusterize:reload')
const { describeExit } = require('./readiness')
const { isFailureReason } = require('./worker-record')

/**
 * @param {object} config resolved configuration
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {object} log
 * @returns {{ reload: () => Promise<object>, recycle: (record: object, reason: string) => Promise<void>, isReplacing: (record: object) => boolean }}
 */
function createReloader (config, supervisor, log) {
  const { readyTimeoutMs, drainTimeoutMs, batch, bakeMs } = config.reload
  /** Workers whose successor is on its way. */
  const replacing = new WeakSet()

  /**
   * Start a slot's successor and wait until it is ready; kill it and reject
   * if it is not.
   */
  async function startSuccessor (slot, generation) {
    const successor = supervisor.spawn(slot, generation) // throws once shutdown started
    try {
      await supervisor.waitReady(successor, readyTimeoutMs)
    } catch (err) {
      supervisor.kill(successor, 'reload-failed')
      throw err
    }
    return successor
  }

  /**
   * Replace one slot: successor ready, promoted, then the old one drains.
   * @returns {Promise<object|null>} the old worker's exit
   */
  async function replaceSlot (slot, generation, reason) {
    const old = supervisor.slots[slot]
    if (old) replacing.add(old)
    let successor
    try {
      successor = await startSuccessor(slot, generation)
    } finally {
      if (old) replacing.delete(old)
    }
    if (supervisor.stopped) {
      supervisor.retire(successor, 'shutdown', config.shutdown.timeoutMs)
      throw new Error('shutting down')
    }
    supervisor.promote(successor)
    return old ? supervisor.retire(old, reason, drainTimeoutMs) : null
  }

  /**
   * Replace a worker gracefully (memory limits): its successor runs the code on disk. A ready
   * spare that loaded that code takes the slot at once; otherwise a successor is forked first.
   */
  async function recycle (record, reason) {
    if (replacing.has(record) || supervisor.stopped || supervisor.slots[record.id] !== record) return
    if (supervisor.promoteSpare(record.id, reason)) {
      await supervisor.retire(record, reason, drainTimeoutMs)
      return
    }
    try {
      await replaceSlot(record.id, supervisor.codeGeneration, reason)
    } catch (err) {
      if (!supervisor.stopped) log.error(`could not recycle worker ${record.id}: ${err.message}`)
    }
  }

  /**
   * The canary serves for bakeMs while its predecessor is kept alive.
   * @returns {Promise<string|null>} why it failed, or null
   */
  async function tryCanary (slot, generation) {
    const successor = await startSuccessor(slot, generation)
    supervisor.promote(successor, true)
    const failure = bakeMs > 0 ? await supervisor.survives(successor, bakeMs) : null
    if (failure) return `${failure} (reload.bakeMs is ${bakeMs})`
    if (!successor.isReady()) return `worker ${slot} (generation ${generation}) left the ready state while baking: ${successor.state}`
    return null
  }

  async function reload () {
    const started = Date.now()
    const generation = supervisor.codeGeneration + 1
    const slots = supervisor.slots.map((_, slot) => slot)
    log.info(`reload started: generation ${generation}, ${slots.length} workers`)
    const retiring = []
    let replaced = 0
    let stopReason = null
    function watchNewGeneration (record, event) {
      if (record.generation === generation && isFailureReason(event.reason) && !stopReason) {
        stopReason = describeExit(record, event)
      }
    }
    supervisor.on('record:exit', watchNewGeneration)
    const finish = (result) => {
      supervisor.removeListener('record:exit', watchNewGeneration)
      result.generation = result.ok ? generation : supervisor.generation
      result.durationMs = Date.now() - started
      result.replaced = replaced
      return Promise.all(retiring).then(() => result)
    }

    let canaryFailure
    try {
      canaryFailure = await tryCanary(slots[0], generation)
    } catch (err) {
      canaryFailure = err.message
    }
    if (canaryFailure) {
      const successor = supervisor.slots[slots[0]]
      const predecessor = supervisor.release(slots[0])
      if (predecessor && !predecessor.isExited()) {
        supervisor.promote(predecessor)
        if (successor && successor !== predecessor) supervisor.kill(successor, 'reload-failed')
      }
      log.error(`reload rolled back: the new code failed: ${canaryFailure}`)
      return finish({ ok: false, rolledBack: true, reason: canaryFailure })
    }
    const predecessor = supervisor.release(slots[0])
    if (predecessor) retiring.push(supervisor.retire(predecessor, 'reload', drainTimeoutMs))
    replaced++
    supervisor.generation = generation
    debug('canary of generation %d survived its bake window', generation)

    for (let i = 1; i < slots.length; i += batch) {
      if (stopReason) break
      const group = slots.slice(i, i + batch)
      const outcomes = await Promise.allSettled(group.map((slot) => replaceSlot(slot, generation, 'reload')))
      for (const outcome of outcomes) {
        if (outcome.status === 'fulfilled') {
          replaced++
          retiring.push(outcome.value)
        } else if (!stopReason) {
          stopReason = outcome.reason.message
        }
      }
    }
    if (stopReason) {
      const kept = slots.length - replaced
      log.error(`reload stopped: ${stopReason}; ${replaced} of ${slots.length} slots run generation ${generation}, ${kept} keep the previous generation`)
      return finish({ ok: false, rolledBack: false, reason: stopReason })
    }
    supervisor.spares.refresh(generation, drainTimeoutMs)
    log.info(`reload done: generation ${generation}`, { replaced, durationMs: Date.now() - started })
    return finish({ ok: true, rolledBack: false, reason: null })
  }

  return { reload, recycle, isReplacing: (record) => replacing.has(record) }
}

module.exports = { createReloader }
