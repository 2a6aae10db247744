'use strict'

/**
 * Forks workers into stable slots (0..N-1), replaces crashed ones with
 * backoff, and trips a crash-loop breaker instead of forking forever.
 * Slot ids are reused by replacements so `CLUSTERIZE_WORKER_ID` is stable.
 */

const EventEmitter = require('events')
const debug = require('debug')('clusterize:supervisor')
const ipc = require('../ipc')
const protocol = require('../protocol')
const { backoffDelay } = require('./backoff')
const { Breaker } = require('./breaker')
const { WorkerRecord, STATES, isFailureReason } = require('./worker-record')
const { Spares } = require('./spares')
const { logExit } = require('./readiness')
const { drainOrKill, killNow } = require('./retire')

/** A worker that stays ready this long is considered healthy again. */
const STABLE_AFTER_MS = 30000

class Supervisor extends EventEmitter {
  /**
   * @param {object} config resolved configuration
   * @param {object} log internal logger
   * @param {{ listenMode: string, port: number, route: (record: WorkerRecord, message: object, handle?: *) => void, fork: (env: object) => import('cluster').Worker }} runtime
   *   `route` receives every envelope a worker sends (the primary's routing table); `fork`
   *   starts a worker process (cluster.fork in the primary; the unit tests pass a fake)
   */
  constructor (config, log, runtime) {
    super()
    if (typeof runtime.fork !== 'function') throw new TypeError('Supervisor: runtime.fork must be a function')
    this.config = config
    this.log = log
    this.runtime = runtime
    this.slots = new Array(config.workers).fill(null)
    this.records = new Set()
    this.failures = new Array(config.workers).fill(0)
    this.restarts = new Array(config.workers).fill(0)
    this.respawnTimers = new Set()
    this.breaker = new Breaker(config.restart)
    /** Asked for a worker to serve a slot whose worker failed, instead of a respawn (see setStandIn). */
    this.standIn = () => null
    /** The generation that serves: the last one a reload completed. */
    this.generation = 1
    /**
     * The generation of the code on disk: every reload attempt gets a new one,
     * and every fork after it (a respawn too) runs that code, so it is labelled with it.
     */
    this.codeGeneration = 1
    this.crashLooping = false
    this.everReady = false
    this.stopped = false
    this.lastFailure = null
    this.spares = new Spares(this, config.spare || 0)
  }

  /** Fork one worker per slot, then the spares. */
  start () {
    for (let slot = 0; slot < this.slots.length; slot++) {
      this.slots[slot] = this.spawn(slot, this.generation)
    }
    this.spares.replenish()
  }

  /** Fork a warm spare: it loads the app and reports ready, but is in no slot until promoted. */
  spawnSpare () {
    return this.spawn(-1, this.codeGeneration, true)
  }

  /**
   * Put a ready spare in a slot at once: an empty one (its worker died), or
   * one whose worker is being recycled (`recycled`: the caller retires it).
   * @param {number} slot
   * @param {string} [recycled] why the slot's live worker is replaced (memory); only a spare
   *   of the code generation now on disk will do then, since a new fork would load that code
   * @returns {boolean} false when no spare was ready
   */
  promoteSpare (slot, recycled) {
    const record = this.spares.take(recycled ? this.codeGeneration : 0)
    if (!record) return false
    // A recycle is not a crash: the slot's restart count stays.
    if (!recycled) this.restarts[slot]++
    record.id = slot
    record.spare = false
    record.restarts = this.restarts[slot]
    this.slots[slot] = record
    record.channel.postNow(protocol.promote(slot))
    debug('spare pid %d promoted to slot %d', record.pid, slot)
    this.log.info(`worker ${slot} replaced by a warm spare${recycled ? ` (recycled: ${recycled})` : ''}`, { pid: record.pid, generation: record.generation })
    this.emit('worker:ready', record.publicView())
    this.emit('record:ready', record)
    this.spares.refillAfterPromotion()
    return true
  }

  /**
   * Fork a worker for a slot. The caller decides whether it becomes the
   * slot's current worker (at once, or after it is ready via promote()).
   * @param {number} slot
   * @param {number} [generation] the code it loads: the code on disk by default
   * @param {boolean} [spare]
   * @returns {object} the worker record
   */
  spawn (slot, generation, spare) {
    if (this.stopped) throw new Error('shutting down: no new workers are started')
    if (generation === undefined) generation = this.codeGeneration
    if (generation > this.codeGeneration) {
      // New code gets its own failure budget; the old code's tripped breaker no longer applies.
      this.codeGeneration = generation
      this.crashLooping = false
    }
    const worker = this.runtime.fork({
      CLUSTERIZE_WORKER_ID: String(slot),
      CLUSTERIZE_GENERATION: String(generation),
      CLUSTERIZE_WORKERS: String(this.slots.length),
      CLUSTERIZE_LISTEN: this.runtime.listenMode,
      CLUSTERIZE_PORT: String(this.runtime.port),
      CLUSTERIZE_LISTEN_FD: this.runtime.listenFd != null ? String(this.runtime.listenFd) : '',
      CLUSTERIZE_SPARE: spare ? '1' : ''
    })
    const record = new WorkerRecord(slot, worker, generation, spare ? 0 : this.restarts[slot])
    record.spare = Boolean(spare)
    this.records.add(record)
    ipc.listen(worker, (message, handle) => this.runtime.route(record, message, handle))
    worker.on('error', (err) => debug('worker %d error: %s', slot, err.message))
    worker.once('exit', (code, signal) => this.onExit(record, code, signal))
    debug('forked slot %d pid %d generation %d', slot, record.pid, generation)
    this.emit('worker:fork', record)
    return record
  }

  /** The worker listens: it may get traffic. */
  onReady (record, message) {
    if (!record.markReady(message.address)) return
    this.everReady = true
    this.log.info(record.spare ? 'warm spare ready' : `worker ${record.id} ready`, { pid: record.pid, generation: record.generation })
    this.emit('worker:ready', record.publicView())
    this.emit('record:ready', record)
  }

  onHeartbeat (record, message) {
    if (!message.figures || typeof message.figures !== 'object') return
    record.recordHeartbeat(message.figures, message.session)
    this.emit('record:heartbeat', record)
  }

  onBootError (record, message) {
    record.bootError = String(message.message)
    record.bootErrorDeterministic = message.deterministic === true
  }

  onDrained (record, message) {
    record.drainTimedOut = message.timedOut === true
    debug('worker %d drained%s', record.id, message.timedOut ? ' (deadline passed)' : '')
  }

  onExit (record, code, signal) {
    this.records.delete(record)
    const wasCurrent = this.slots[record.id] === record
    const reason = record.exitReason()
    record.state = STATES.EXITED
    const event = { id: record.id, pid: record.pid, code, signal, reason, generation: record.generation }
    Object.defineProperty(event, 'at', { value: Date.now() })
    if (reason === 'boot-failure' && record.bootErrorDeterministic && !this.everReady) {
      // Every retry would fail the same way: stop at the first one.
      if (!this.stopped) {
        this.lastFailure = record.bootError
        this.stop()
        this.emit('boot-fatal', record.bootError)
      }
    } else {
      this.lastFailure = logExit(this.log, record, event) || this.lastFailure
    }
    record.exitEvent = event
    this.emit('record:exit', record, event)
    this.emit('worker:exit', event)
    record.resolveExited(event)

    const isFailure = isFailureReason(reason)
    if (record.spare) {
      this.spares.onExit(record, isFailure)
      return this.emit('record:gone', record)
    }
    if (isFailure) this.countFailure(record)
    if (!wasCurrent) return this.emit('record:gone', record)
    this.slots[record.id] = null
    if (this.stopped) return this.emit('record:gone', record)
    const standIn = isFailure ? this.standIn(record) : null
    if (standIn) {
      this.slots[record.id] = standIn
      return this.emit('record:gone', record)
    }
    if (!this.crashLooping && !this.promoteSpare(record.id)) {
      this.scheduleRespawn(record.id, isFailure ? backoffDelay(this.failures[record.id], this.config.restart) : 0)
    }
    this.emit('record:gone', record)
  }

  /** Count a failure against its slot's backoff and its generation's breaker. */
  countFailure (record) {
    if (record.everReady && Date.now() - record.readyAt > STABLE_AFTER_MS) this.failures[record.id] = 0
    this.failures[record.id]++
    const trip = this.breaker.recordFailure(record.generation)
    if (trip) this.onCrashLoop(record, trip)
  }

  /** No worker runs and none is coming: nothing will ever serve again. */
  isEmpty () {
    return this.records.size === 0 && this.respawnTimers.size === 0
  }

  scheduleRespawn (slot, delayMs) {
    if (this.crashLooping || this.stopped) return
    if (delayMs > 0) this.log.info(`restarting worker ${slot} in ${delayMs} ms`)
    const timer = setTimeout(() => {
      this.respawnTimers.delete(timer)
      // A slot scaled away meanwhile (./scaling.js) is not served any more.
      if (this.stopped || this.crashLooping || slot >= this.slots.length || this.slots[slot]) return
      this.restarts[slot]++
      this.slots[slot] = this.spawn(slot, this.codeGeneration)
    }, delayMs)
    this.respawnTimers.add(timer)
  }

  /** A generation tripped the breaker: once it is the code on disk, nothing is respawned. */
  onCrashLoop (record, trip) {
    // Every fork runs the newest code, so once its breaker trips nothing is respawned.
    if (trip.generation === this.codeGeneration) {
      this.crashLooping = true
      this.clearRespawns()
    }
    const info = {
      reason: record.exitReason(),
      generation: trip.generation,
      crashes: trip.crashes,
      windowMs: trip.windowMs,
      lastError: this.lastFailure,
      workersLeft: this.readyRecords().length
    }
    this.log.error(`crash loop: ${trip.maxCrashes} failures of generation ${trip.generation} within ${trip.windowMs} ms, not restarting any more workers; last failure: ${this.lastFailure}`, { workersLeft: info.workersLeft })
    this.emit('crashloop', info)
  }

  clearRespawns () {
    for (const timer of this.respawnTimers) clearTimeout(timer)
    this.respawnTimers.clear()
  }

  /** Make a ready worker (a reload's successor, or a predecessor back after a rollback) its slot's current one. */
  promote (record) {
    this.slots[record.id] = record
  }

  /**
   * Let `standIn(failed)` offer a live worker to serve the slot of a worker that failed, instead of
   * a spare or a respawn: the reload gives back the predecessor it keeps while a successor bakes.
   * @param {(failed: WorkerRecord) => (WorkerRecord|null)} standIn
   */
  setStandIn (standIn) {
    this.standIn = standIn
  }

  /** @returns {WorkerRecord|null} the worker serving `slot` */
  current (slot) {
    return this.slots[slot]
  }

  /** @returns {number[]} every slot id, 0..workers-1 */
  slotIds () {
    return this.slots.map((_, slot) => slot)
  }

  /** @returns {{ serving: number, onDisk: number }} the generation a reload last committed, and the newest code forked */
  generations () {
    return { serving: this.generation, onDisk: this.codeGeneration }
  }

  /** A reload committed: `generation` serves, and spares that loaded older code are replaced. */
  commitGeneration (generation, drainTimeoutMs) {
    this.generation = generation
    this.spares.refresh(generation, drainTimeoutMs)
  }

  /** Shutdown started: no worker is started any more. */
  isStopped () {
    return this.stopped
  }

  /**
   * Ask a worker to drain and exit; SIGKILL it if the deadline passes (./retire.js).
   * @returns {Promise<object>} its exit event
   */
  retire (record, reason, timeoutMs) {
    return drainOrKill(this, record, reason, timeoutMs)
  }

  /**
   * Kill a worker at once (hang, failed canary, forced shutdown).
   * @param {string} [detail] why, for the crash-loop breaker's message (a hang)
   */
  kill (record, reason, detail) {
    return killNow(this, record, reason, detail)
  }

  /** Is the worker process `pid` draining or stopping? */
  isRetiringPid (pid) {
    for (const record of this.records) if (record.pid === pid) return record.isRetiring()
    return false
  }

  /** Workers that may receive new connections. */
  readyRecords () {
    return this.slots.filter((record) => record && record.isReady())
  }

  liveRecords () {
    return Array.from(this.records)
  }

  /** Stop respawning (shutdown in progress). */
  stop () {
    this.stopped = true
    this.clearRespawns()
    this.spares.stop()
  }
}

module.exports = { Supervisor }
