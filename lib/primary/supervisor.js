'use strict'

/**
 * Forks workers into stable slots (0..N-1), replaces crashed ones with
 * backoff, and trips a crash-loop breaker instead of forking forever.
 * Slot ids are reused by replacements so `CLUSTERIZE_WORKER_ID` is stable.
 */

const cluster = require('cluster')
const EventEmitter = require('events')
const debug = require('debug')('clusterize:supervisor')
const ipc = require('../ipc')
const { backoffDelay, CrashWindow } = require('./backoff')

/** A worker that stays ready this long is considered healthy again. */
const STABLE_AFTER_MS = 30000

class Supervisor extends EventEmitter {
  /**
   * @param {object} config resolved configuration
   * @param {object} log internal logger
   * @param {{ listenMode: string, port: number, onEnvelope: Function }} runtime
   */
  constructor (config, log, runtime) {
    super()
    this.config = config
    this.log = log
    this.runtime = runtime
    this.slots = new Array(config.workers).fill(null)
    this.records = new Set()
    this.failures = new Array(config.workers).fill(0)
    this.restarts = new Array(config.workers).fill(0)
    this.respawnTimers = new Set()
    this.crashWindow = new CrashWindow(config.restart)
    this.generation = 1
    this.crashLooping = false
    this.stopped = false
    this.lastFailure = null
  }

  /** Fork one worker per slot. */
  start () {
    for (let slot = 0; slot < this.slots.length; slot++) {
      this.slots[slot] = this.spawn(slot, this.generation)
    }
  }

  /**
   * Fork a worker for a slot. The caller decides whether it becomes the
   * slot's current worker (at once, or after it is ready via promote()).
   * @returns {object} the worker record
   */
  spawn (slot, generation) {
    if (this.stopped) throw new Error('shutting down: no new workers are started')
    const worker = cluster.fork({
      CLUSTERIZE_WORKER_ID: String(slot),
      CLUSTERIZE_GENERATION: String(generation),
      CLUSTERIZE_WORKERS: String(this.slots.length),
      CLUSTERIZE_LISTEN: this.runtime.listenMode,
      CLUSTERIZE_PORT: String(this.runtime.port)
    })
    const record = {
      id: slot,
      worker,
      pid: worker.process.pid,
      generation,
      state: 'starting',
      startedAt: Date.now(),
      readyAt: 0,
      everReady: false,
      restarts: this.restarts[slot],
      heartbeat: null,
      heartbeatAt: 0,
      overloaded: false,
      connections: 0,
      pendingHandoffs: 0,
      handoffs: new Set(),
      retireReason: null,
      bootError: null,
      channel: new ipc.Channel(worker),
      exited: null
    }
    record.exited = new Promise((resolve) => { record.resolveExited = resolve })
    this.records.add(record)
    ipc.listen(worker, (message, handle) => this.onEnvelope(record, message, handle))
    worker.on('error', (err) => debug('worker %d error: %s', slot, err.message))
    worker.once('exit', (code, signal) => this.onExit(record, code, signal))
    debug('forked slot %d pid %d generation %d', slot, record.pid, generation)
    this.emit('worker:fork', record)
    return record
  }

  onEnvelope (record, message, handle) {
    switch (message.kind) {
      case 'ready':
        if (record.state !== 'starting') return
        record.state = 'ready'
        record.readyAt = Date.now()
        record.everReady = true
        record.address = message.address
        this.log.info(`worker ${record.id} ready`, { pid: record.pid, generation: record.generation })
        this.emit('worker:ready', publicWorker(record))
        this.emit('record:ready', record)
        break
      case 'heartbeat':
        if (!message.figures || typeof message.figures !== 'object') return
        record.heartbeat = message.figures
        record.session = message.session
        record.heartbeatAt = Date.now()
        this.emit('record:heartbeat', record)
        break
      case 'boot-error':
        record.bootError = String(message.message)
        break
      case 'drained':
        record.drainTimedOut = message.timedOut === true
        debug('worker %d drained%s', record.id, message.timedOut ? ' (deadline passed)' : '')
        break
      default:
        this.runtime.onEnvelope(record, message, handle)
    }
  }

  onExit (record, code, signal) {
    this.records.delete(record)
    const wasCurrent = this.slots[record.id] === record
    const reason = record.retireReason || (record.everReady ? 'crash' : 'boot-failure')
    record.state = 'exited'
    const event = { id: record.id, pid: record.pid, code, signal, reason, generation: record.generation }
    if (reason === 'boot-failure') {
      this.lastFailure = record.bootError || `exited with ${signal || 'code ' + code} before it was ready`
      this.log.error(`worker ${record.id} failed to boot: ${this.lastFailure}`, { pid: record.pid, generation: record.generation })
    } else if (reason === 'crash') {
      this.lastFailure = `exited unexpectedly with ${signal || 'code ' + code}`
      this.log.warn(`worker ${record.id} crashed: ${this.lastFailure}`, { pid: record.pid, generation: record.generation })
    } else {
      this.log.info(`worker ${record.id} exited (${reason})`, { pid: record.pid, code, signal: signal || undefined })
    }
    this.emit('record:exit', record, event)
    this.emit('worker:exit', event)
    record.resolveExited(event)

    if (!wasCurrent) return
    this.slots[record.id] = null
    if (this.stopped) return
    const isFailure = reason === 'crash' || reason === 'boot-failure' || reason === 'hang'
    if (isFailure) {
      if (record.everReady && Date.now() - record.readyAt > STABLE_AFTER_MS) this.failures[record.id] = 0
      this.failures[record.id]++
      if (this.crashWindow.record()) return this.tripBreaker(record, reason)
    }
    this.scheduleRespawn(record.id, isFailure ? backoffDelay(this.failures[record.id], this.config.restart) : 0)
  }

  scheduleRespawn (slot, delayMs) {
    if (this.crashLooping || this.stopped) return
    if (delayMs > 0) this.log.info(`restarting worker ${slot} in ${delayMs} ms`)
    const timer = setTimeout(() => {
      this.respawnTimers.delete(timer)
      if (this.stopped || this.crashLooping || this.slots[slot]) return
      this.restarts[slot]++
      this.slots[slot] = this.spawn(slot, this.generation)
    }, delayMs)
    this.respawnTimers.add(timer)
  }

  tripBreaker (record, reason) {
    this.crashLooping = true
    this.clearRespawns()
    const { maxCrashes, crashWindowMs } = this.config.restart
    const info = {
      reason,
      crashes: this.crashWindow.count,
      windowMs: crashWindowMs,
      lastError: this.lastFailure,
      workersLeft: this.readyRecords().length
    }
    this.log.error(`crash loop: ${maxCrashes} worker failures within ${crashWindowMs} ms, not restarting any more workers; last failure: ${this.lastFailure}`, { workersLeft: info.workersLeft })
    this.emit('crashloop', info)
  }

  clearRespawns () {
    for (const timer of this.respawnTimers) clearTimeout(timer)
    this.respawnTimers.clear()
  }

  /** Make a ready replacement the slot's current worker. */
  promote (record) {
    this.slots[record.id] = record
  }

  /**
   * Ask a worker to drain and exit; SIGKILL it if the deadline passes.
   * @returns {Promise<object>} its exit event
   */
  retire (record, reason, timeoutMs) {
    if (record.state === 'exited') return record.exited
    if (!record.retireReason) record.retireReason = reason
    if (record.state === 'draining' || record.state === 'stopping') return record.exited
    record.state = reason === 'shutdown' ? 'stopping' : 'draining'
    this.emit('record:unready', record)
    if (!record.channel.postNow(ipc.envelope('drain', { timeoutMs, reason }))) {
      record.worker.process.kill('SIGKILL')
    }
    // The worker enforces the deadline itself; this is the backstop.
    const timer = setTimeout(() => {
      if (record.state === 'exited') return
      this.log.warn(`worker ${record.id} did not drain within ${timeoutMs} ms, killing it`, { pid: record.pid })
      record.forced = true
      record.worker.process.kill('SIGKILL')
    }, timeoutMs + 2000)
    timer.unref()
    record.exited.then(() => clearTimeout(timer))
    return record.exited
  }

  /** Kill a worker at once (hang, failed canary, forced shutdown). */
  kill (record, reason) {
    if (record.state === 'exited') return record.exited
    if (!record.retireReason) record.retireReason = reason
    record.state = 'stopping'
    this.emit('record:unready', record)
    record.worker.process.kill('SIGKILL')
    return record.exited
  }

  /**
   * Resolve once the worker is ready and has sent its first heartbeat;
   * reject if it exits or the timeout passes first.
   */
  waitReady (record, timeoutMs) {
    return new Promise((resolve, reject) => {
      const cleanup = () => {
        clearTimeout(timer)
        this.removeListener('record:heartbeat', onHeartbeat)
        this.removeListener('record:exit', onExit)
      }
      const onHeartbeat = (r) => {
        if (r === record && r.state === 'ready') {
          cleanup()
          resolve(record)
        }
      }
      const onExit = (r, event) => {
        if (r !== record) return
        cleanup()
        const why = record.bootError ? `failed to boot: ${record.bootError}` : `exited with ${event.signal || 'code ' + event.code} before it was ready`
        reject(new Error(`worker ${record.id} (generation ${record.generation}) ${why}`))
      }
      const timer = setTimeout(() => {
        cleanup()
        reject(new Error(`worker ${record.id} (generation ${record.generation}) was not ready within ${timeoutMs} ms`))
      }, timeoutMs)
      this.on('record:heartbeat', onHeartbeat)
      this.on('record:exit', onExit)
      if (record.state === 'ready' && record.heartbeatAt > 0) onHeartbeat(record)
    })
  }

  /** Workers that may receive new connections. */
  readyRecords () {
    const ready = []
    for (const record of this.slots) {
      if (record && record.state === 'ready') ready.push(record)
    }
    return ready
  }

  liveRecords () {
    return Array.from(this.records)
  }

  /** Stop respawning (shutdown in progress). */
  stop () {
    this.stopped = true
    this.clearRespawns()
  }
}

/** The worker view given to users in events and stats(). */
function publicWorker (record) {
  return { id: record.id, pid: record.pid, generation: record.generation, state: record.state }
}

module.exports = { Supervisor, publicWorker }
