'use strict'

/**
 * The primary's half of app-metrics aggregation, plain data in and out, so
 * it runs behind the service layer (lib/services) or in a test:
 * - workers report their prom-client registries (getMetricsAsJSON()
 *   arrays) on an interval and when asked (notification OP.REPORT, ./ops.js);
 * - each worker keeps one OP.NEXT request waiting here; a scrape answers
 *   them all ("report now", with the scrape's number) and waits at most
 *   `timeoutMs` for the reports. A worker that does not answer in time
 *   counts with its last report and is named as missing;
 * - a gone worker's last counters and histograms move into RetainedTotals,
 *   so the sums never go down;
 * - after a full report a worker sends numbers only (./values.js); one that
 *   does not fit the report held here is refused and the worker asked for a
 *   full one (answer `{ full: true }`).
 * Workers are told apart by pid (`caller.pid`), unique while they live.
 */

const debug = require('debug')('clusterize:metrics')
const { HOLD_MS } = require('./ops')
const { RetainedTotals } = require('./retained')
const { applyValues } = require('./values')

/**
 * A report still in flight when its worker's exit is handled must not count
 * twice: a gone pid's reports are ignored for GONE_MS (a pid is not reused
 * that fast), at most GONE_MEMORY pids remembered.
 */
const GONE_MS = 60000
const GONE_MEMORY = 1024

class MetricsService {
  /**
   * @param {{ timeoutMs: number, holdMs?: number, now?: () => number }} options
   */
  constructor (options) {
    this.timeoutMs = options.timeoutMs
    this.holdMs = options.holdMs || HOLD_MS
    this.now = options.now || Date.now
    /** @type {Map<number, { worker: object, metrics: object[], at: number, seq: number, asked: number }>} by pid */
    this.reports = new Map()
    /** @type {Map<number, { resolve: Function, timer: * }>} the waiting OP.NEXT of each pid */
    this.waiting = new Map()
    this.retained = new RetainedTotals()
    /** @type {Map<number, number>} pid -> when it exited */
    this.gone = new Map()
    this.seq = 0
    /** The collection in flight: concurrent scrapes share it. */
    this.round = null
    /** @type {Set<number>} pids whose values report did not fit: their next question asks for a full one */
    this.fullWanted = new Set()
  }

  /**
   * Handler for the notification OP.REPORT.
   * @param {{ seq?: number, metrics: object[] }} data
   * @param {{ id: number, pid: number, generation: number }} caller
   */
  report (data, caller) {
    if (!caller || this.isGone(caller.pid) || !data || typeof data !== 'object') return
    const seq = Number.isInteger(data.seq) ? data.seq : 0
    const held = this.reports.get(caller.pid)
    // An interval push read before a scrape's answer may arrive after it.
    if (held && seq !== 0 && seq < held.seq) return
    if (data.metrics === null) {
      // The worker could not read its registries (an app collect() threw): its last values
      // stand, it is named missing, and the scrape does not wait for it.
      if (held && this.round && seq >= this.round.seq) this.round.answered(caller.pid)
      return
    }
    const shape = Number.isInteger(data.shape) ? data.shape : 0
    let metrics
    if (data.values !== undefined) {
      if (!held || shape === 0 || held.shape !== shape || !applyValues(held.metrics, data.values)) return this.askFull(caller.pid, seq)
      metrics = held.metrics
    } else {
      // Checked piece by piece where it is used (./snapshot.js): a report is never copied.
      metrics = Array.isArray(data.metrics) ? data.metrics : []
      this.fullWanted.delete(caller.pid)
    }
    this.reports.set(caller.pid, {
      worker: { slot: caller.id, pid: caller.pid, generation: caller.generation },
      metrics,
      shape,
      at: this.now(),
      seq: Math.max(seq, held ? held.seq : 0),
      asked: held ? held.asked : 0
    })
    if (this.round && seq >= this.round.seq) this.round.answered(caller.pid)
  }

  /**
   * Handler for the request OP.NEXT: resolves with `{ seq }` when a scrape
   * wants fresh values (seq 0: nothing wanted, ask again).
   * @param {*} _data
   * @param {{ pid: number }} caller
   * @returns {{ seq: number }|Promise<{ seq: number }>}
   */
  next (_data, caller) {
    const pid = caller.pid
    if (this.isGone(pid)) return { seq: 0 }
    if (this.fullWanted.delete(pid)) return this.fullQuestion(pid)
    const held = this.reports.get(pid)
    // A scrape started while this worker was busy with the previous question.
    if (this.round && held && held.asked < this.round.seq && this.round.waiting.has(pid)) return this.ask(pid, held)
    this.release(pid, 0)
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.release(pid, 0), this.holdMs)
      if (timer.unref) timer.unref()
      this.waiting.set(pid, { resolve, timer })
    })
  }

  /** Answer pid's waiting OP.NEXT, if any, with `seq` (or the question given). */
  release (pid, seq, question) {
    const entry = this.waiting.get(pid)
    if (entry === undefined) return false
    this.waiting.delete(pid)
    clearTimeout(entry.timer)
    // values: this primary takes values reports; not offered in-process, where a report is
    // the app's own prom-client objects, which the primary must never write into.
    entry.resolve(question || { seq, values: pid !== process.pid })
    return true
  }

  /** A values report that does not fit what is held: ask this worker for a full report. */
  askFull (pid, seq) {
    debug('pid %d: values report (seq %d) does not fit the held report: asking for a full one', pid, seq)
    if (!this.release(pid, 0, this.fullQuestion(pid))) this.fullWanted.add(pid)
  }

  /** "Send everything", with the scrape's number if one waits for this pid. */
  fullQuestion (pid) {
    const seq = this.round && this.round.waiting.has(pid) ? this.round.seq : 0
    return { seq, full: true, values: pid !== process.pid }
  }

  ask (pid, held) {
    held.asked = this.round.seq
    return { seq: this.round.seq, values: pid !== process.pid }
  }

  /**
   * The worker exited: its last report joins the retained totals.
   * @param {{ pid: number }} caller
   */
  workerExit (caller) {
    const pid = caller.pid
    if (this.isGone(pid)) return
    const now = this.now()
    for (const [gonePid, at] of this.gone) {
      if (now - at < GONE_MS && this.gone.size < GONE_MEMORY) break
      this.gone.delete(gonePid)
    }
    this.gone.set(pid, now)
    this.fullWanted.delete(pid)
    this.release(pid, 0)
    const held = this.reports.get(pid)
    this.reports.delete(pid)
    if (held) {
      debug('worker pid %d gone: its counters and histograms stay in the totals', pid)
      this.retained.fold(held.metrics)
    }
    if (this.round) this.round.answered(pid)
  }

  /** Did this pid exit lately? (After GONE_MS the pid may be a new worker's.) */
  isGone (pid) {
    const at = this.gone.get(pid)
    if (at === undefined) return false
    if (this.now() - at < GONE_MS) return true
    this.gone.delete(pid)
    return false
  }

  /**
   * Ask every worker that has app metrics for fresh values; resolve when all
   * answered or `timeoutMs` passed, whichever is first. Never rejects.
   * @returns {Promise<{ workers: Array<{ slot: number, pid: number, generation: number, metrics: object[], ageMs: number, answered: boolean }>, retained: object[], retainedWorkers: number }>}
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
    // Only workers that reported have app metrics: a worker without
    // prom-client is never asked, so an app without metrics scrapes as before.
    const asked = Array.from(this.reports.keys())
    const waiting = new Set(asked)
    let finish
    const promise = new Promise((resolve) => { finish = resolve })
    const timer = waiting.size === 0
      ? null
      : setTimeout(function roundTimeout () {
        debug('scrape %d: %d worker(s) did not answer in time', seq, waiting.size)
        finish()
      }, this.timeoutMs)
    const round = {
      seq,
      asked,
      waiting,
      promise,
      answered (pid) {
        if (!waiting.delete(pid) || waiting.size > 0) return
        clearTimeout(timer)
        finish()
      }
    }
    if (timer === null) {
      finish()
      return round
    }
    this.round = round
    for (const pid of asked) {
      const held = this.reports.get(pid)
      held.asked = seq
      // A worker with no question waiting is answered when it asks next (next()).
      if (!this.release(pid, seq)) held.asked = 0
    }
    return round
  }

  result (round) {
    const now = this.now()
    const workers = []
    for (const pid of round.asked) {
      const held = this.reports.get(pid)
      if (held === undefined) continue
      workers.push(Object.assign({}, held.worker, { metrics: held.metrics, ageMs: now - held.at, answered: held.seq >= round.seq }))
    }
    return { workers, retained: this.retained.snapshot(), retainedWorkers: this.retained.workers }
  }

  /**
   * What crosses an upgrade (lib/primary/handover.js): the retained totals, the last
   * report of each live worker (the old workers report to the new primary from now on,
   * and a values report needs the full one it fits), the gone pids and the scrape number.
   * @returns {Array<Array<*>>}
   */
  exportState () {
    const items = [['seq', this.seq], ['retained', this.retained.snapshot(), this.retained.workers]]
    for (const [pid, held] of this.reports) items.push(['report', pid, { worker: held.worker, metrics: held.metrics, shape: held.shape, seq: held.seq }])
    for (const [pid, at] of this.gone) items.push(['gone', pid, at])
    // Questions waiting here are answered now: the workers ask again, of the new primary.
    for (const pid of Array.from(this.waiting.keys())) this.release(pid, 0)
    return items
  }

  /** @param {Array<Array<*>>} items as exportState() gives them */
  importState (items) {
    for (const item of items) {
      if (!Array.isArray(item)) continue
      if (item[0] === 'seq' && Number.isInteger(item[1])) {
        // Later scrapes are numbered past the old primary's: a report's number never looks old.
        this.seq = Math.max(this.seq, item[1])
      } else if (item[0] === 'retained' && Array.isArray(item[1])) {
        this.retained.add(item[1])
        if (Number.isInteger(item[2])) this.retained.workers += item[2]
      } else if (item[0] === 'report' && Number.isInteger(item[1]) && item[2] && Array.isArray(item[2].metrics) && !this.reports.has(item[1])) {
        const held = item[2]
        this.reports.set(item[1], { worker: held.worker, metrics: held.metrics, shape: Number.isInteger(held.shape) ? held.shape : 0, at: this.now(), seq: Number.isInteger(held.seq) ? held.seq : 0, asked: 0 })
        this.seq = Math.max(this.seq, Number.isInteger(held.seq) ? held.seq : 0)
      } else if (item[0] === 'gone' && Number.isInteger(item[1]) && Number.isFinite(item[2])) {
        this.gone.set(item[1], item[2])
      }
    }
  }

  /** Shutdown: answer every waiting question. */
  close () {
    for (const pid of Array.from(this.waiting.keys())) this.release(pid, 0)
  }
}

module.exports = { MetricsService }
