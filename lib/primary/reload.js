'use strict'

/**
 * Rolling reload with a canary: one worker of the new generation must come
 * up (listen, report ready, send a heartbeat) before any old worker is
 * touched; if it fails, the old generation keeps serving. Then the rest are
 * replaced `batch` at a time, each new worker ready before its old one drains.
 */

/**
 * @param {object} config resolved configuration
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {object} log
 * @returns {() => Promise<object>} runs one reload
 */
function createReloader (config, supervisor, log) {
  const { readyTimeoutMs, drainTimeoutMs, batch } = config.reload

  /**
   * Replace one slot: start its successor, wait until ready, promote it,
   * drain the old one. Rejects (and kills the successor) if it fails.
   */
  async function replaceSlot (slot, generation) {
    const old = supervisor.slots[slot]
    const successor = supervisor.spawn(slot, generation) // throws once shutdown started
    try {
      await supervisor.waitReady(successor, readyTimeoutMs)
    } catch (err) {
      supervisor.kill(successor, 'reload-failed')
      throw err
    }
    supervisor.promote(successor)
    return old ? supervisor.retire(old, 'reload', drainTimeoutMs) : null
  }

  return async function reload () {
    const started = Date.now()
    const generation = supervisor.generation + 1
    const slots = supervisor.slots.map((_, slot) => slot)
    log.info(`reload started: generation ${generation}, ${slots.length} workers`)
    const retiring = []
    let replaced = 0
    const finish = (result) => {
      result.generation = result.ok ? generation : supervisor.generation
      result.durationMs = Date.now() - started
      result.replaced = replaced
      return Promise.all(retiring).then(() => result)
    }

    try {
      retiring.push(await replaceSlot(slots[0], generation))
    } catch (err) {
      log.error(`reload rolled back: the new code failed: ${err.message}`)
      return finish({ ok: false, rolledBack: true, reason: err.message })
    }
    replaced++
    supervisor.generation = generation

    for (let i = 1; i < slots.length; i += batch) {
      const group = slots.slice(i, i + batch)
      const outcomes = await Promise.allSettled(group.map((slot) => replaceSlot(slot, generation)))
      for (const outcome of outcomes) {
        if (outcome.status === 'fulfilled') {
          replaced++
          retiring.push(outcome.value)
        } else {
          log.error(`reload stopped: ${outcome.reason.message}`)
          return finish({ ok: false, rolledBack: false, reason: outcome.reason.message })
        }
      }
    }
    log.info(`reload done: generation ${generation}`, { replaced, durationMs: Date.now() - started })
    return finish({ ok: true, rolledBack: false, reason: null })
  }
}

module.exports = { createReloader }
