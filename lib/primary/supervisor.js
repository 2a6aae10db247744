'use strict'

/**
 * Forks workers into stable slots (0..N-1) and replaces failed ones with
 * backoff. Slot ids are reused by replacements so `CLUSTERIZE_WORKER_ID` is stable.
 *
 * A failure is one of three kinds. A worker that had stayed ready for
 * `restart.stableAfterMs` and then crashed or hung was brought down by what it
 * was serving (a request-level fault, a "query of death"): it is restarted at
 * once and never counted by the crash-loop breaker. A worker that failed to
 * boot, was not ready within `reload.readyTimeoutMs`, or failed sooner after
 * ready runs code that cannot stay up: that is what the breaker counts. A fork
 * that failed (EMFILE, EAGAIN) says nothing about the code: it is retried with
 * backoff and keeps /ready at 503 until a worker is ready in that slot.
 *
 * The breaker never ends the primary once a worker has been ready: while it is
 * open the empty slots are retried every `restart.backoffMaxMs` (with jitter),
 * and it closes when a worker of that code stays up `restart.stableAfterMs`.
 * Only at the first start (no worker ever ready) does a trip give up.
 */

const EventEmitter = require('events')
const debug = require('debug')('clusterize:supervisor')
const ipc = require('../ipc')
const protocol = require('../protocol')
const { backoffDelay, cappedDelay } = require('./backoff')
const { Breaker } = require('./breaker')
const { WorkerRecord, STATES, isFailureReason } = require('./worker-record')
const { Spares } = require('./spares')
const { logExit } = require('./readiness')
const { drainOrKill, killNow } = require('./retire')
const { afterLastMessages } = require('../services/host')

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
    /** The breaker is open for the code on disk: empty slots are retried at the capped backoff. */
    this.crashLooping = false
    /** The breaker tripped before any worker was ever ready: nothing is started any more. */
    this.gaveUp = false
    this.everReady = false
    this.stopped = false
    this.lastFailure = null
    /** Failures by kind since the start: request-level faults, failed starts, failed forks. */
    this.failureCounts = { request: 0, start: 0, fork: 0 }
    /** Slots whose last fork failed: capacity is missing until a worker is ready there again. */
    this.forkFailing = new Set()
    this.aliveAsked = 0
    this.spares = new Spares(this, config.spare || 0)
  }

  /** Fork one worker per slot, then the spares. */
  start () {
    for (let slot = 0; slot < this.slots.length; slot++) {
      this.slots[slot] = this.forkSlot(slot, this.generation)
    }
    this.spares.replenish()
  }

  /**
   * Fork a worker for a slot the supervisor fills itself (start, respawn), with the boot
   * watchdog. A fork that throws (EPERM, ENOMEM...) is a failed fork: logged, counted, retried.
   * @returns {WorkerRecord|null} null when the fork failed at once
   */
  forkSlot (slot, generation) {
    const record = this.forkWatched(`worker ${slot}`, slot, generation, false)
    if (record === null && !this.stopped) {
      this.forkFailing.add(slot)
      this.failures[slot]++
      this.scheduleRespawn(slot, backoffDelay(this.failures[slot], this.config.restart))
    }
    return record
  }

  /**
   * spawn() with the boot watchdog; a fork that throws is logged and counted as a failed fork.
   * @param {string} what how the log names it
   * @returns {WorkerRecord|null} null when the fork failed at once
   */
  forkWatched (what, slot, generation, spare) {
    let record
    try {
      record = this.spawn(slot, generation, spare)
    } catch (err) {
      if (this.stopped) return null
      this.failureCounts.fork++
      if (!spare) this.lastFailure = `could not fork a worker process: ${err.message}`
      this.log.error(`could not fork ${what}: ${err.message}`, { code: err.code })
      return null
    }
    this.watchBoot(record)
    return record
  }

  /**
   * A worker the supervisor started must be ready within reload.readyTimeoutMs, as a reload's
   * are: one that never is (an app whose createApp() or listen never finishes) is logged,
   * killed and handled as a failed start, instead of holding its slot silently.
   */
  watchBoot (record) {
    const timeoutMs = this.config.reload.readyTimeoutMs
    const timer = setTimeout(() => {
      if (record.state !== STATES.STARTING) return
      record.bootError = `it was not ready within ${timeoutMs} ms (reload.readyTimeoutMs): its createApp() or listen never finished`
      this.log.error(`${record.spare ? 'warm spare' : `worker ${record.id}`} was not ready within ${timeoutMs} ms (reload.readyTimeoutMs): killing it`, { pid: record.pid, generation: record.generation })
      killNow(this, record, 'boot-failure')
    }, timeoutMs)
    if (typeof timer.unref === 'function') timer.unref()
    record.exited.then(() => clearTimeout(timer))
  }

  /**
   * Fork a warm spare: it loads the app and reports ready, but is in no slot until promoted.
   * @returns {WorkerRecord|null} null when the fork failed at once (logged and counted)
   */
  spawnSpare () {
    return this.forkWatched('a warm spare', -1, this.codeGeneration, true)
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
    worker.on('error', (err) => {
      // Only a process that never started has no pid: its spawn failed (EMFILE, EAGAIN, ENOENT).
      if (record.pid === undefined) return this.onForkError(record, err)
      debug('worker %d error: %s', slot, err.message)
    })
    worker.once('exit', (code, signal) => this.onExit(record, code, signal))
    debug('forked slot %d pid %d generation %d', slot, record.pid, generation)
    this.emit('worker:fork', record)
    return record
  }

  /**
   * The spawn failed: no process, and no 'exit' will ever come (with EMFILE not even a
   * 'disconnect'). It is a failed start: the record exits here, so whoever waits on it
   * (a stop, a reload) goes on, and the slot is retried with backoff.
   */
  onForkError (record, err) {
    if (record.isExited()) return
    record.forkError = err.code || 'ERROR'
    record.bootError = `could not fork a worker process: ${err.message}`
    this.onExit(record, null, null)
  }

  /** The worker listens: it may get traffic. */
  onReady (record, message) {
    if (!record.markReady(message.address)) return
    if (message.session !== undefined && record.session === undefined) record.session = message.session
    this.everReady = true
    if (!record.spare) this.forkFailing.delete(record.id)
    this.log.info(record.spare ? 'warm spare ready' : `worker ${record.id} ready`, { pid: record.pid, generation: record.generation })
    this.emit('worker:ready', record.publicView())
    this.emit('record:ready', record)
  }

  onHeartbeat (record, message) {
    if (!message.figures || typeof message.figures !== 'object') return
    record.recordHeartbeat(message.figures, message.session)
    if (this.crashLooping && this.provesCodeStaysUp(record)) this.closeBreaker(record)
    this.emit('record:heartbeat', record)
  }

  /** Its answer to askAlive(). */
  onAlive (record, message) {
    if (!Number.isInteger(message.n)) return
    record.aliveAnswered = Math.max(record.aliveAnswered || 0, message.n)
    this.emit('record:alive', record)
  }

  /**
   * Ask a worker to answer at once (a reload's commit): its answer proves its event loop ran
   * after now, which a heartbeat already on its way cannot.
   * @returns {number} the question's number: answered once record.aliveAnswered reaches it
   */
  askAlive (record) {
    const n = ++this.aliveAsked
    record.channel.postNow(protocol.aliveAsk(n))
    return n
  }

  /** A heartbeat of a worker of the code on disk, ready for restart.stableAfterMs. */
  provesCodeStaysUp (record) {
    return !record.spare && record.generation === this.codeGeneration && record.isReady() &&
      record.heartbeatAt - record.readyAt >= this.config.restart.stableAfterMs
  }

  /** The code on disk stays up again: restarts are no longer held back. */
  closeBreaker (record) {
    this.crashLooping = false
    this.breaker.reset(record.generation)
    this.log.info(`crash loop over: worker ${record.id} (generation ${record.generation}) stayed up ${record.heartbeatAt - record.readyAt} ms; failed workers are restarted with the normal backoff again`, { pid: record.pid })
    this.spares.replenish()
  }

  onBootError (record, message) {
    record.bootError = String(message.message)
    record.bootErrorDeterministic = message.deterministic === true
  }

  onDrained (record, message) {
    record.drained = true
    record.drainTimedOut = message.timedOut === true
    debug('worker %d drained%s', record.id, message.timedOut ? ' (deadline passed)' : '')
  }

  onExit (record, code, signal) {
    if (record.drainAsked && !record.drained && !record.lastMessagesRead) {
      // Whether it drained is in its last message, which may still be in the pipe: read it first.
      record.lastMessagesRead = true
      return afterLastMessages(record, () => this.onExit(record, code, signal))
    }
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
    const kind = isFailure ? this.failureKind(record, event) : null
    if (kind) this.failureCounts[kind]++
    if (record.spare) {
      this.spares.onExit(record, isFailure)
      return this.emit('record:gone', record)
    }
    if (isFailure) this.countFailure(record, kind)
    if (!wasCurrent) return this.emit('record:gone', record)
    this.slots[record.id] = null
    if (this.stopped) return this.emit('record:gone', record)
    const standIn = isFailure ? this.standIn(record) : null
    if (standIn) {
      this.slots[record.id] = standIn
      return this.emit('record:gone', record)
    }
    if (!this.promoteSpare(record.id)) {
      this.scheduleRespawn(record.id, isFailure ? backoffDelay(this.failures[record.id], this.config.restart) : 0)
    }
    this.emit('record:gone', record)
  }

  /**
   * 'request': it had stayed ready restart.stableAfterMs (until its crash, or its last
   * heartbeat for a hang), so what it was serving brought it down; 'fork': it never started;
   * 'start': it failed to boot, or failed sooner after ready (code that cannot stay up).
   */
  failureKind (record, event) {
    if (record.forkError) return 'fork'
    if (!record.everReady) return 'start'
    const upTo = event.reason === 'hang' ? (record.heartbeatAt || record.readyAt) : event.at
    return upTo - record.readyAt >= this.config.restart.stableAfterMs ? 'request' : 'start'
  }

  /** Count a failure against its slot's backoff and, for a failed start, its generation's breaker. */
  countFailure (record, kind) {
    // A request-level fault is a first failure again: it is restarted at once.
    if (kind === 'request') this.failures[record.id] = 0
    this.failures[record.id]++
    if (kind === 'fork') this.forkFailing.add(record.id)
    if (kind !== 'start') return
    const trip = this.breaker.recordFailure(record.generation)
    if (trip) this.onCrashLoop(record, trip)
  }

  /** No worker runs and none is coming: nothing will ever serve again. */
  isEmpty () {
    return this.records.size === 0 && this.respawnTimers.size === 0
  }

  scheduleRespawn (slot, delayMs) {
    if (this.gaveUp || this.stopped) return
    if (this.crashLooping) {
      // The breaker is open: the code on disk keeps failing, so retry it at the capped backoff.
      delayMs = Math.max(delayMs, cappedDelay(this.config.restart))
      this.log.warn(`crash loop: retrying worker ${slot} in ${delayMs} ms (the breaker is open; /ready answers 503)`)
    } else if (delayMs > 0) {
      this.log.info(`restarting worker ${slot} in ${delayMs} ms`)
    }
    const timer = setTimeout(() => {
      this.respawnTimers.delete(timer)
      // A slot scaled away meanwhile (./scaling.js) is not served any more.
      if (this.stopped || this.gaveUp || slot >= this.slots.length || this.slots[slot]) return
      this.restarts[slot]++
      this.slots[slot] = this.forkSlot(slot, this.codeGeneration)
    }, delayMs)
    this.respawnTimers.add(timer)
  }

  /**
   * A generation tripped the breaker. Once it is the code on disk the breaker is open: empty
   * slots are retried at the capped backoff, and the workers still up keep serving. Before
   * any worker was ever ready (the first start) nothing would serve: it gives up.
   */
  onCrashLoop (record, trip) {
    if (trip.generation === this.codeGeneration) {
      this.crashLooping = true
      if (!this.everReady) {
        this.gaveUp = true
        this.clearRespawns()
      }
    }
    const info = {
      reason: record.exitReason(),
      generation: trip.generation,
      crashes: trip.crashes,
      windowMs: trip.windowMs,
      lastError: this.lastFailure,
      workersLeft: this.readyRecords().length
    }
    const what = `crash loop: ${trip.maxCrashes} failures of generation ${trip.generation} within ${trip.windowMs} ms`
    if (this.gaveUp) {
      this.log.error(`${what} before any worker was ready, not restarting any more workers; last failure: ${this.lastFailure}`, { workersLeft: info.workersLeft })
    } else if (trip.generation === this.codeGeneration) {
      const { backoffMaxMs, stableAfterMs } = this.config.restart
      this.log.error(`${what}; the breaker is open: ${info.workersLeft} worker(s) keep serving, /ready answers 503, and failed workers are retried every ${backoffMaxMs} ms or so until one of generation ${trip.generation} stays up ${stableAfterMs} ms; last failure: ${this.lastFailure}`, { workersLeft: info.workersLeft })
    } else {
      this.log.error(`${what} (not the code on disk any more: restarts load generation ${this.codeGeneration}); last failure: ${this.lastFailure}`, { workersLeft: info.workersLeft })
    }
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
