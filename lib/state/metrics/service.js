'use strict'

/**
 * The primary's half of app-metrics aggregation, as plain data in and out
 * so it runs behind any transport: workers report their prom-client
 * registries (getMetricsAsJSON() arrays) on an interval and when asked;
 * a scrape asks every live worker for fresh values and waits at most
 * `timeoutMs`; a worker that does not answer in time counts with its last
 * report and is named as missing. A gone worker's last counters and
 * histograms move into RetainedTotals so the sums never go down.
 */

const debug = require('debug')('clusterize:metrics')
const { cleanSnapshot } = require('./snapshot')
const { RetainedTotals } = require('./retained')

const { OP } = require('./ops')

/** Reports that arrive after their worker is gone are ignored; this many gone keys are remembered. */
const GONE_MEMORY = 1024

class MetricsService {
  /**
   * @param {object} options
   * @param {number} options.timeoutMs how long a scrape waits for a worker's fresh report
   * @param {() => Array<{ key: *, slot: number, pid: number, generation: number }>} options.live the live workers (those that reported are asked)
   * @param {(key: *, op: string, data: object) => void} options.send a message to one worker
   * @param {() => number} [options.now]
   */
  constructor (options) {
    this.timeoutMs = options.timeoutMs
    this.live = options.live
    this.send = options.send
    this.now = options.now || Date.now
    /** @type {Map<*, { metrics: object[], at: number, seq: number }>} */
    this.reports = new Map()
    this.retained = new RetainedTotals()
    this.gone = new Set()
    this.seq = 0
    /** The collection in flight: concurrent scrapes share it. */
    this.round = null
  }

  /**
   * Handler for OP.REPORT.
   * @param {*} key the reporting worker
   * @param {{ seq?: number, metrics: object[] }} data
   */
  report (key, data) {
    if (this.gone.has(key) || !data || typeof data !== 'object') return
    const seq = Number.isInteger(data.seq) ? data.seq : 0
    const held = this.reports.get(key)
    // An interval push computed before a scrape's answer may arrive after it.
    if (held && seq !== 0 && seq < held.seq) return
    this.reports.set(key, { metrics: cleanSnapshot(data.metrics), at: this.now(), seq: Math.max(seq, held ? held.seq : 0) })
    if (this.round && seq >= this.round.seq) this.round.answered(key)
  }

  /**
   * The worker exited: its last report joins the retained totals.
   * @param {*} key
   */
  workerGone (key) {
    if (this.gone.has(key)) return
    this.gone.add(key)
    if (this.gone.size > GONE_MEMORY) this.gone.delete(this.gone.values().next().value)
    const held = this.reports.get(key)
    this.reports.delete(key)
    if (held) {
      debug('worker %s gone: its counters and histograms stay in the totals', key)
      this.retained.fold(held.metrics)
    }
    if (this.round) this.round.answered(key)
  }

  /**
   * Ask every live worker for fresh values; resolve when all answered or
   * `timeoutMs` passed, whichever is first. Never rejects.
   * @returns {Promise<{ workers: Array<{ key: *, slot: number, pid: number, generation: number, metrics: object[], ageMs: number, answered: boolean, reported: boolean }>, retained: object[], retainedWorkers: number }>}
   */
  collect () {
    let round = this.round
    if (!round) {
      round = this.round = this.startRound()
      round.promise.then(() => { if (this.round === round) this.round = null })
    }
    return round.promise.then(() => this.result(round))
  }

  startRound () {
    const seq = ++this.seq
    // Only workers that ever reported have app metrics: a worker without
    // prom-client is never asked, so an app without metrics scrapes as before.
    const asked = this.live().filter((worker) => this.reports.has(worker.key))
    const waiting = new Set(asked.map((worker) => worker.key))
    let finish
    const promise = new Promise((resolve) => { finish = resolve })
    const timer = setTimeout(function roundTimeout () {
      debug('scrape %d: %d worker(s) did not answer in time', seq, waiting.size)
      finish()
    }, this.timeoutMs)
    const round = {
      seq,
      asked,
      waiting,
      promise,
      answered (key) {
        waiting.delete(key)
        if (waiting.size === 0) {
          clearTimeout(timer)
          finish()
        }
      }
    }
    if (waiting.size === 0) {
      clearTimeout(timer)
      finish()
      return round
    }
    for (const worker of asked) {
      try {
        this.send(worker.key, OP.COLLECT, { seq })
      } catch (err) {
        debug('could not ask worker %s: %s', worker.key, err.message)
      }
    }
    return round
  }

  result (round) {
    const now = this.now()
    const workers = []
    for (const worker of round.asked) {
      if (this.gone.has(worker.key)) continue
      const held = this.reports.get(worker.key)
      workers.push({
        key: worker.key,
        slot: worker.slot,
        pid: worker.pid,
        generation: worker.generation,
        metrics: held ? held.metrics : [],
        ageMs: held ? now - held.at : 0,
        answered: Boolean(held) && held.seq >= round.seq,
        reported: Boolean(held)
      })
    }
    return { workers, retained: this.retained.snapshot(), retainedWorkers: this.retained.workers }
  }
}

module.exports = { MetricsService, OP }
