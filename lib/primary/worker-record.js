'use strict'

/**
 * What the primary knows about one worker process. The supervisor owns the
 * lifecycle fields; modules that need more per-worker data (the dispatcher's
 * handoffs, health's overload flag) keep it in their own maps.
 */

const ipc = require('../ipc')

/** A worker's states, in the order it goes through them. */
const STATES = Object.freeze({
  STARTING: 'starting',
  READY: 'ready',
  DRAINING: 'draining',
  STOPPING: 'stopping',
  EXITED: 'exited'
})

class WorkerRecord {
  /**
   * @param {number} slot stable slot id (CLUSTERIZE_WORKER_ID)
   * @param {import('cluster').Worker} worker
   * @param {number} generation the generation of the code it loads
   * @param {number} restarts how many times this slot was restarted
   */
  constructor (slot, worker, generation, restarts) {
    this.id = slot
    this.worker = worker
    this.pid = worker.process.pid
    this.generation = generation
    this.restarts = restarts
    /** A warm spare: ready, but in no slot until promoted (its id is -1 until then). */
    this.spare = false
    this.state = STATES.STARTING
    this.startedAt = Date.now()
    this.readyAt = 0
    this.everReady = false
    this.address = null
    /** Last heartbeat figures and when they came. */
    this.heartbeat = null
    this.heartbeatAt = 0
    /** The worker's session store status, from its heartbeat. */
    this.session = undefined
    /** Why the primary ended it (reload, memory, hang, shutdown...), or null: it died by itself. */
    this.retireReason = null
    /** What the primary saw when it killed it (a hang: how long it was silent), or null. */
    this.retireDetail = null
    this.bootError = null
    /** The boot error is one every retry would repeat (the app cannot load). */
    this.bootErrorDeterministic = false
    /** Its spawn failed (the error code, EMFILE...): no process ever ran. */
    this.forkError = null
    /** The last question of the primary's it answered (Supervisor#askAlive). */
    this.aliveAnswered = 0
    /** Killed at the drain deadline / reported its drain timed out. */
    this.forced = false
    this.drainTimedOut = false
    /** Asked to drain (not killed at once), and whether it said it had drained. */
    this.drainAsked = false
    this.drained = false
    /** Its exit waited for its last messages once (lib/services/host.js afterLastMessages). */
    this.lastMessagesRead = false
    this.channel = new ipc.Channel(worker)
    this.exitEvent = null
    this.exited = new Promise((resolve) => { this.resolveExited = resolve })
  }

  /** May receive new connections and work. */
  isReady () {
    return this.state === STATES.READY
  }

  /** Still running and not being stopped: messages to it will be read. */
  isLive () {
    return this.state !== STATES.STOPPING && this.state !== STATES.EXITED
  }

  /** Draining or stopping: retired, on its way out. */
  isRetiring () {
    return this.state === STATES.DRAINING || this.state === STATES.STOPPING
  }

  isExited () {
    return this.state === STATES.EXITED
  }

  /**
   * The worker reported it listens.
   * @returns {boolean} false if it was not starting (a late or repeated report)
   */
  markReady (address) {
    if (this.state !== STATES.STARTING) return false
    this.state = STATES.READY
    this.readyAt = Date.now()
    this.everReady = true
    this.address = address
    return true
  }

  recordHeartbeat (figures, session) {
    this.heartbeat = figures
    this.session = session
    this.heartbeatAt = Date.now()
  }

  /**
   * It had served, was asked to drain, and exited without saying it had drained, nor being
   * killed at the deadline: the app ended its own process mid-drain, cutting what was in
   * flight. (One never ready served nothing, so it cut nothing.)
   * @returns {boolean}
   */
  endedMidDrain () {
    return this.everReady && this.drainAsked && !this.drained && !this.forced
  }

  /** The reason its exit is reported with. */
  exitReason () {
    return this.retireReason || (this.everReady ? 'crash' : 'boot-failure')
  }

  /** The view given to users in events and stats(). */
  publicView () {
    return { id: this.id, pid: this.pid, generation: this.generation, state: this.spare && this.state === STATES.READY ? 'spare' : this.state }
  }
}

/** Exit reasons that count against the crash-loop breaker (the others were asked for). */
const FAILURE_REASONS = new Set(['crash', 'boot-failure', 'hang'])

/** @param {string} reason an exit reason @returns {boolean} */
function isFailureReason (reason) {
  return FAILURE_REASONS.has(reason)
}

module.exports = { WorkerRecord, STATES, isFailureReason }
