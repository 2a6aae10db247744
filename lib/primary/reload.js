'use strict'

/**
 * Rolling reload with a canary while baking: one worker of the new
 * generation must come up (listen, report ready, send a heartbeat) and then
 * stay healthy for `reload.bakeMs` while it serves, its predecessor kept
 * alive beside it. Then the rest are replaced `batch` at a time, each new
 * worker ready before its predecessor steps aside, and the whole generation
 * serves for one more `reload.bakeMs` before the reload commits.
 *
 * Until it commits, the replaced workers are held (alive, out of rotation):
 * if any worker of the new generation fails in that time (exits by itself,
 * misses heartbeats for `reload.heartbeatTimeoutMs`, trips the memory guard),
 * the rollout stops and every slot it replaced goes back to its old worker.
 * Code that crashes, hangs or leaks shortly after its bake is rolled back
 * instead of replacing every slot and then tripping the crash-loop breaker.
 * With `bakeMs: 0` nothing is held: old workers drain at once and a failure
 * only stops the rollout.
 *
 * Recycling one worker (memory limits) is the same step for one slot.
 */

const debug = require('debug')('clusterize:reload')
const { watchRollout } = require('./rollout-watch')
const { waitReady } = require('./readiness')

/**
 * @param {object} config resolved configuration
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {object} log
 * @returns {{ reload: () => Promise<object>, recycle: (record: object, reason: string, detail?: string) => Promise<void>, isReplacing: (record: object) => boolean }}
 */
function createReloader (config, supervisor, log) {
  const { readyTimeoutMs, drainTimeoutMs, batch, bakeMs, heartbeatTimeoutMs } = config.reload
  const { promote, release } = holdPredecessors(supervisor, log)
  /** Workers whose successor is on its way. */
  const replacing = new WeakSet()
  /** The reload in progress: { generation, watch }, or null. */
  let rollout = null

  /**
   * Start a slot's successor and wait until it is ready; kill it and reject
   * if it is not.
   */
  async function startSuccessor (slot, generation) {
    const successor = supervisor.spawn(slot, generation) // throws once shutdown started
    try {
      await waitReady(supervisor, successor, readyTimeoutMs)
    } catch (err) {
      supervisor.kill(successor, 'reload-failed')
      throw err
    }
    return successor
  }

  /**
   * Replace one slot: successor ready, promoted, then the old one drains,
   * or (`hold`) stays alive out of rotation until release().
   * @returns {Promise<object|null>} the old worker's exit (null when held or there was none)
   */
  async function replaceSlot (slot, generation, reason, hold) {
    const old = supervisor.current(slot)
    if (old) replacing.add(old)
    let successor
    try {
      successor = await startSuccessor(slot, generation)
    } finally {
      if (old) replacing.delete(old)
    }
    if (supervisor.isStopped()) {
      supervisor.retire(successor, 'shutdown', config.shutdown.timeoutMs)
      throw new Error('shutting down')
    }
    promote(successor, hold)
    return old && !hold ? supervisor.retire(old, reason, drainTimeoutMs) : null
  }

  /**
   * Replace a worker gracefully (memory limits): its successor runs the code on disk. A ready
   * spare that loaded that code takes the slot at once; otherwise a successor is forked first.
   * A worker of the generation a reload is rolling out is not recycled: needing it
   * is a failure of the new code, and the reload rolls back.
   * @param {string} [detail] what is wrong, for the reload's reason
   */
  async function recycle (record, reason, detail) {
    if (rollout && record.generation === rollout.generation && !record.spare) {
      rollout.watch.fail(`worker ${record.id} (generation ${record.generation}) ${detail || `needs recycling (${reason})`}`)
      return
    }
    if (replacing.has(record) || supervisor.isStopped() || supervisor.current(record.id) !== record) return
    if (supervisor.promoteSpare(record.id, reason)) {
      await supervisor.retire(record, reason, drainTimeoutMs)
      return
    }
    try {
      await replaceSlot(record.id, undefined, reason, false)
    } catch (err) {
      if (!supervisor.isStopped()) log.error(`could not recycle worker ${record.id}: ${err.message}`)
    }
  }

  /**
   * Wait `ms` unless the new generation fails first; then check every new worker's last beat,
   * and that each answers a question asked now: its heartbeats cover the bake up to its end.
   */
  async function serveFor (watch, ms) {
    if (ms > 0 && !watch.failure) {
      let timer
      await Promise.race([watch.failed, new Promise((resolve) => { timer = setTimeout(resolve, ms) })])
      clearTimeout(timer)
    }
    // Heartbeats that arrived while this timer fired are read in the I/O phase that follows.
    await new Promise((resolve) => setImmediate(resolve))
    watch.checkBeats()
    if (!watch.failure && !supervisor.isStopped()) await watch.confirm()
    if (supervisor.isStopped()) watch.fail('shutting down')
  }

  /**
   * Give every slot the rollout replaced back to the worker it held.
   * @param {Promise[]} killed collects the exits of the new workers it kills
   * @returns {number} slots that keep the new generation (their old worker is gone)
   */
  function rollBack (touched, generation, killed) {
    let kept = 0
    for (const slot of touched) {
      const current = supervisor.current(slot)
      const predecessor = release(slot)
      if (predecessor && !predecessor.isExited()) {
        supervisor.promote(predecessor)
        if (current && current !== predecessor) killed.push(supervisor.kill(current, 'reload-failed'))
      } else if (current && current.generation === generation) {
        kept++
      }
    }
    return kept
  }

  async function reload () {
    const started = Date.now()
    const { serving, onDisk } = supervisor.generations()
    const generation = onDisk + 1
    const slots = supervisor.slotIds()
    const hold = bakeMs > 0
    log.info(`reload started: generation ${generation}, ${slots.length} workers`)
    const watch = watchRollout(supervisor, generation, heartbeatTimeoutMs)
    rollout = { generation, watch }
    /** Slots whose new worker took over (held or not). */
    const touched = []
    const retiring = []
    const finish = (result) => {
      watch.stop()
      rollout = null
      result.generation = result.ok ? generation : serving
      result.durationMs = Date.now() - started
      return Promise.all(retiring).then(() => result)
    }

    // The canary: its predecessor is always held while it bakes.
    let bootFailure = null
    try {
      const successor = await startSuccessor(slots[0], generation)
      promote(successor, true)
      touched.push(slots[0])
      await serveFor(watch, bakeMs)
      if (!watch.failure && !successor.isReady()) watch.fail(`worker ${slots[0]} (generation ${generation}) left the ready state while baking: ${successor.state}`)
    } catch (err) {
      bootFailure = err.message
    }
    const canaryFailure = bootFailure || watch.failure
    if (canaryFailure && supervisor.isStopped()) {
      // The shutdown stopped the canary: nothing failed, and no slot is handed back to a worker that drains too.
      log.info('reload stopped: the primary is shutting down')
      return finish({ ok: false, rolledBack: false, reason: 'shutting down', replaced: 0 })
    }
    if (canaryFailure) {
      rollBack(touched, generation, retiring)
      const reason = `${canaryFailure} (reload.bakeMs is ${bakeMs})`
      log.error(`reload rolled back: the new code failed: ${reason}`)
      return finish({ ok: false, rolledBack: true, reason, replaced: 0 })
    }
    if (!hold) {
      const predecessor = release(slots[0])
      if (predecessor) retiring.push(supervisor.retire(predecessor, 'reload', drainTimeoutMs))
    }
    debug('canary of generation %d survived its bake window', generation)

    for (let i = 1; i < slots.length && !watch.failure; i += batch) {
      const group = slots.slice(i, i + batch)
      const outcomes = await Promise.allSettled(group.map((slot) => replaceSlot(slot, generation, 'reload', hold)))
      outcomes.forEach((outcome, k) => {
        if (outcome.status === 'rejected') return watch.fail(outcome.reason.message)
        touched.push(group[k])
        if (outcome.value) retiring.push(outcome.value)
      })
      watch.checkBeats()
    }
    // The last workers replaced get a bake too, and the canary a longer one.
    if (hold) await serveFor(watch, bakeMs)

    if (watch.failure) {
      if (hold) {
        const kept = rollBack(touched, generation, retiring)
        const rolledBack = kept === 0
        log.error(`reload rolled back: the new code failed after the canary's bake: ${watch.failure}` +
          (rolledBack ? '' : `; ${kept} slot(s) keep generation ${generation} (their old worker is gone)`))
        return finish({ ok: false, rolledBack, reason: watch.failure, replaced: kept })
      }
      const replaced = touched.length
      log.error(`reload stopped: ${watch.failure}; ${replaced} of ${slots.length} slots run generation ${generation}, ${slots.length - replaced} keep the previous generation`)
      return finish({ ok: false, rolledBack: false, reason: watch.failure, replaced })
    }
    for (const slot of touched) {
      const predecessor = release(slot)
      if (predecessor) retiring.push(supervisor.retire(predecessor, 'reload', drainTimeoutMs))
    }
    supervisor.commitGeneration(generation, drainTimeoutMs)
    log.info(`reload done: generation ${generation}`, { replaced: touched.length, durationMs: Date.now() - started })
    return finish({ ok: true, rolledBack: false, reason: null, replaced: touched.length })
  }

  return { reload, recycle, isReplacing: (record) => replacing.has(record) }
}

/**
 * The hold of a bake: a successor takes its slot while its predecessor is
 * kept alive out of rotation until release(). If the successor fails first,
 * the supervisor asks for a stand-in and the predecessor serves again.
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {object} log
 * @returns {{ promote: (successor: object, hold?: boolean) => void, release: (slot: number) => (object|undefined) }}
 */
function holdPredecessors (supervisor, log) {
  /** slot -> the predecessor kept alive while its successor bakes */
  const held = new Map()

  supervisor.setStandIn(function standIn (failed) {
    const predecessor = held.get(failed.id)
    if (!predecessor || predecessor.isExited()) return null
    held.delete(failed.id)
    log.warn(`worker ${failed.id}: generation ${failed.generation} failed while baking; generation ${predecessor.generation} (pid ${predecessor.pid}) serves again`)
    return predecessor
  })

  /** Make a ready successor its slot's current worker; with `hold`, keep the one it replaces. */
  function promote (successor, hold) {
    const predecessor = supervisor.current(successor.id)
    if (hold && predecessor && predecessor !== successor) held.set(successor.id, predecessor)
    supervisor.promote(successor)
  }

  /** End a successor's bake: the predecessor kept alive, now to be retired (or undefined). */
  function release (slot) {
    const predecessor = held.get(slot)
    held.delete(slot)
    return predecessor
  }

  return { promote, release }
}

module.exports = { createReloader, holdPredecessors }
