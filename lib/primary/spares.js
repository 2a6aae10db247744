'use strict'

/**
 * Warm spares (`spare: n`): workers forked ahead of need that have loaded
 * the app and report ready but take no traffic (they are in no slot, and
 * with 'none'/'reuseport' they do not listen). When a slot's worker dies, or
 * is recycled for its memory, a ready spare takes its slot at once and a new
 * spare is forked behind it.
 * Spares run the code they loaded: after a successful reload they are
 * replaced by spares of the new generation; after a rolled-back one they
 * are kept, since they run the code that still serves.
 */

const debug = require('debug')('clusterize:spares')
const { backoffDelay } = require('./backoff')

/**
 * After a promotion the next spare is forked this much later: forking and
 * booting a process takes a core for a while, which the promoted spare needs
 * for its first requests, on small machines most of all.
 */
const REFILL_AFTER_PROMOTION_MS = 250

class Spares {
  /**
   * @param {import('./supervisor').Supervisor} supervisor
   * @param {number} count spares to keep
   */
  constructor (supervisor, count) {
    this.supervisor = supervisor
    this.count = count
    /** @type {Set<import('./worker-record').WorkerRecord>} */
    this.records = new Set()
    this.failures = 0
    this.timer = null
  }

  /**
   * Fork spares until there are `count`: at once, after a backoff when spares
   * keep failing, or a little later when one was just promoted.
   * @param {number} [minDelayMs=0]
   */
  replenish (minDelayMs) {
    const supervisor = this.supervisor
    if (this.timer || supervisor.stopped || supervisor.crashLooping) return
    if (this.records.size >= this.count) return
    const delayMs = Math.max(backoffDelay(this.failures, supervisor.config.restart), minDelayMs || 0)
    const fork = () => {
      this.timer = null
      if (supervisor.stopped || supervisor.crashLooping) return
      while (this.records.size < this.count) {
        const record = supervisor.spawnSpare()
        if (!record) {
          // The fork itself failed: try again after a backoff, never in a tight loop.
          this.failures++
          return this.replenish(REFILL_AFTER_PROMOTION_MS)
        }
        this.records.add(record)
      }
    }
    if (delayMs === 0) return fork()
    this.timer = setTimeout(fork, delayMs)
    this.timer.unref()
  }

  /**
   * A ready spare for a slot that needs a worker now, or null.
   * @param {number} [minGeneration=0] only a spare that loaded this code generation or a newer one
   * @returns {import('./worker-record').WorkerRecord|null}
   */
  take (minGeneration) {
    for (const record of this.records) {
      if (record.isReady() && record.heartbeatAt > 0 && record.generation >= (minGeneration || 0)) {
        this.records.delete(record)
        return record
      }
    }
    return null
  }

  /** A spare exited (or was taken): count failures, fork another. */
  onExit (record, isFailure) {
    if (!this.records.delete(record)) return
    if (isFailure) this.failures++
    else if (record.everReady) this.failures = 0
    debug('spare pid %d exited (%s)', record.pid, isFailure ? 'failure' : 'retired')
    this.replenish()
  }

  /** Spares that loaded older code than the generation now serving are retired and replaced. */
  refresh (generation, drainTimeoutMs) {
    for (const record of Array.from(this.records)) {
      if (record.generation < generation) {
        this.records.delete(record)
        this.supervisor.retire(record, 'reload', drainTimeoutMs)
      }
    }
    this.replenish()
  }

  /** A spare was promoted: its replacement is forked once the promoted one has had the CPU for a moment. */
  refillAfterPromotion () {
    this.replenish(REFILL_AFTER_PROMOTION_MS)
  }

  stop () {
    clearTimeout(this.timer)
    this.timer = null
  }
}

module.exports = { Spares }
