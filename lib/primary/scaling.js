'use strict'

/**
 * Changing the number of worker slots while the cluster serves
 * (`handle.scale(n)`, `clusterize scale N`, dynamic workers, the CPU quota).
 *
 * Growing adds slots N..M-1 and forks a worker into each; the step is done
 * once each new slot's worker is ready and has sent a heartbeat. Shrinking
 * takes the highest slots out of the table first (no new connection goes to
 * them), then drains their workers as a reload drains an old one: in-flight
 * requests finish, a keep-alive socket's next request is answered with
 * `Connection: close`, and the step is done once they have exited.
 *
 * Every change of the slot table happens here; the supervisor only has to
 * leave a slot alone once it is gone (its respawn timer checks).
 */

const debug = require('debug')('clusterize:scaling')
const { ClusterizeError } = require('../errors')

/** The largest slot table: the `workers` option's own bound. */
const MAX_WORKERS = 1024

/**
 * @param {{ supervisor: import('./supervisor').Supervisor, log: object, readyTimeoutMs: number, drainTimeoutMs: number }} parts
 * @returns {{ resize: (target: number, why: string) => Promise<object>, count: () => number }}
 */
function createScaling (parts) {
  const { supervisor, log, readyTimeoutMs, drainTimeoutMs } = parts

  /**
   * Bring the slot table to `target` workers.
   * @param {number} target
   * @param {string} why for the log: 'requested', 'load', 'cpu quota'...
   * @returns {Promise<{ ok: boolean, from: number, to: number, ready: number, reason: string|null, durationMs: number }>}
   */
  async function resize (target, why) {
    const started = Date.now()
    const from = supervisor.slots.length
    const done = (ok, reason) => ({ ok, from, to: target, ready: supervisor.readyRecords().length, reason: reason || null, durationMs: Date.now() - started })
    if (supervisor.isStopped()) return done(false, 'shutting down')
    if (target === from) return done(true)
    if (target > from && supervisor.crashLooping) {
      return done(false, 'the crash-loop breaker is open: no worker is started until a reload brings code that boots')
    }
    log.info(`scaling from ${from} to ${target} workers (${why})`)
    const reason = target > from ? await grow(from, target) : await shrink(from, target)
    if (reason) log.warn(`scaling to ${target} workers: ${reason}`)
    else log.info(`scaled to ${target} workers (${why})`, { durationMs: Date.now() - started })
    return done(!reason, reason)
  }

  async function grow (from, target) {
    const slots = []
    for (let slot = from; slot < target; slot++) {
      supervisor.slots.push(null)
      supervisor.failures.push(0)
      supervisor.restarts.push(0)
      // forkSlot: the boot watchdog, and a failed fork counted and retried like any other.
      supervisor.slots[slot] = supervisor.forkSlot(slot, supervisor.codeGeneration)
      slots.push(slot)
    }
    debug('added slots %o', slots)
    return waitSlotsReady(slots)
  }

  async function shrink (from, target) {
    const leaving = []
    for (let slot = from - 1; slot >= target; slot--) {
      const record = supervisor.slots[slot]
      supervisor.slots.length = slot
      supervisor.failures.length = slot
      supervisor.restarts.length = slot
      supervisor.forkFailing.delete(slot)
      if (record) leaving.push(record)
    }
    debug('removed slots %d..%d', target, from - 1)
    await Promise.all(leaving.map((record) => supervisor.retire(record, 'scale-down', drainTimeoutMs)))
    const cut = leaving.filter((record) => record.forced || record.drainTimedOut)
    return cut.length > 0
      ? `${cut.length} retired worker(s) did not drain within reload.drainTimeoutMs (${drainTimeoutMs} ms) and were stopped`
      : null
  }

  /**
   * Resolve with null once every slot's current worker is ready and has sent
   * a heartbeat (a replacement after a crash counts), or with why not at the
   * deadline, on a crash loop or at shutdown. The slots stay either way: the
   * supervisor keeps them served as any other.
   */
  function waitSlotsReady (slots) {
    return new Promise((resolve) => {
      const pending = () => slots.filter((slot) => {
        const record = supervisor.slots[slot]
        return slot < supervisor.slots.length && !(record && record.isReady() && record.heartbeatAt > 0)
      })
      const finish = (reason) => {
        clearTimeout(timer)
        supervisor.removeListener('record:heartbeat', check)
        supervisor.removeListener('record:ready', check)
        supervisor.removeListener('crashloop', onLoop)
        supervisor.removeListener('record:gone', check)
        resolve(reason)
      }
      function check () {
        if (supervisor.isStopped()) return finish('shutting down')
        if (pending().length === 0) finish(null)
      }
      function onLoop () {
        finish(`crash loop: the new workers do not boot (last failure: ${supervisor.lastFailure})`)
      }
      const timer = setTimeout(() => {
        finish(`worker(s) ${pending().join(', ')} not ready within reload.readyTimeoutMs (${readyTimeoutMs} ms); the supervisor keeps trying`)
      }, readyTimeoutMs)
      supervisor.on('record:heartbeat', check)
      supervisor.on('record:ready', check)
      supervisor.on('record:gone', check)
      supervisor.on('crashloop', onLoop)
      check()
    })
  }

  return { resize, count: () => supervisor.slots.length }
}

/**
 * @param {*} value what handle.scale() was given
 * @returns {number} the worker count it asks for
 * @throws {ClusterizeError} naming what it accepts
 */
function checkTarget (value, min, max) {
  const low = min || 1
  const high = max || MAX_WORKERS
  if (!Number.isInteger(value) || value < low || value > high) {
    throw new ClusterizeError(`scale: the worker count must be an integer from ${low} to ${high}${min || max ? ' (workers.min to workers.max)' : ''}, got ${JSON.stringify(value)}`, 'ERR_CLUSTERIZE_SCALE_COUNT')
  }
  return value
}

module.exports = { createScaling, checkTarget, MAX_WORKERS }
