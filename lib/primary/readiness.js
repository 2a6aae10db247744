'use strict'

/**
 * Waiting on workers: every slot at startup, one until it is ready (a
 * reload's successor, a recycle), or through a bake window (a canary), and
 * how its exit is told (in errors and in the log).
 */

const { ClusterizeError, ClusterizeAppError } = require('../errors')

/**
 * Resolve once `count` workers are ready; reject on a crash loop before any
 * worker was ready, or an app that cannot load (the primary's startup). A
 * crash loop after one was ready is not the end: the supervisor keeps retrying.
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {number} count
 * @returns {Promise<void>}
 */
function waitAllReady (supervisor, count) {
  return new Promise((resolve, reject) => {
    function stopWaiting () {
      supervisor.removeListener('record:ready', check)
      supervisor.removeListener('crashloop', onLoop)
      supervisor.removeListener('boot-fatal', onFatal)
    }
    function check () {
      if (supervisor.readyRecords().length !== count) return
      stopWaiting()
      resolve()
    }
    function onLoop (info) {
      if (!supervisor.gaveUp) return
      stopWaiting()
      reject(new ClusterizeError(`crash loop before all workers were ready: ${info.lastError}`, 'ERR_CLUSTERIZE_WORKER_CRASHLOOP'))
    }
    function onFatal (message) {
      stopWaiting()
      reject(new ClusterizeAppError(message))
    }
    supervisor.on('record:ready', check)
    supervisor.on('crashloop', onLoop)
    supervisor.on('boot-fatal', onFatal)
  })
}

/**
 * Resolve once the worker is ready and has sent its first heartbeat;
 * reject if it exits or the timeout passes first.
 * @param {import('events').EventEmitter} events the supervisor ('record:heartbeat', 'record:exit')
 */
function waitReady (events, record, timeoutMs) {
  return new Promise((resolve, reject) => {
    const cleanup = () => {
      clearTimeout(timer)
      events.removeListener('record:heartbeat', onHeartbeat)
      events.removeListener('record:exit', onExit)
    }
    const onHeartbeat = (r) => {
      if (r === record && r.isReady()) {
        cleanup()
        resolve(record)
      }
    }
    const onExit = (r, event) => {
      if (r !== record) return
      cleanup()
      reject(new Error(record.bootError ? `worker ${record.id} (generation ${record.generation}) failed to boot: ${record.bootError}` : describeExit(record, event)))
    }
    const timer = setTimeout(() => {
      cleanup()
      reject(new Error(`worker ${record.id} (generation ${record.generation}) was not ready within ${timeoutMs} ms`))
    }, timeoutMs)
    events.on('record:heartbeat', onHeartbeat)
    events.on('record:exit', onExit)
    if (record.isReady() && record.heartbeatAt > 0) onHeartbeat(record)
  })
}

/**
 * Resolve null if the worker is still running `ms` after now, or a
 * description of its exit if it exits first.
 * @param {import('events').EventEmitter} events the supervisor ('record:exit')
 */
function survives (events, record, ms) {
  return new Promise((resolve) => {
    if (record.isExited()) return resolve(describeExit(record, record.exitEvent))
    const timer = setTimeout(() => {
      events.removeListener('record:exit', onExit)
      resolve(null)
    }, ms)
    const onExit = (r, event) => {
      if (r !== record) return
      clearTimeout(timer)
      events.removeListener('record:exit', onExit)
      resolve(describeExit(record, event))
    }
    events.on('record:exit', onExit)
  })
}

/** 'worker 0 (generation 2) exited with code 1 300 ms after it was ready' */
function describeExit (record, event) {
  const how = howExited(event)
  const after = record.everReady ? `${event.at - record.readyAt} ms after it was ready` : 'before it was ready'
  return `worker ${record.id} (generation ${record.generation}) exited with ${how} ${after}`
}

/**
 * Log a worker's exit as what it was.
 * @returns {string|null} for a failure (boot failure, crash, hang), what went wrong, for the
 *   crash-loop breaker's message; null for an exit the primary asked for
 */
function logExit (log, record, event) {
  const where = { pid: record.pid, generation: record.generation }
  if (record.forkError) {
    const failure = record.bootError
    log.error(`could not fork worker ${record.id < 0 ? '(spare)' : record.id}: ${failure.replace(/^could not fork a worker process: /, '')}${forkHint(record.forkError)}`, { generation: record.generation })
    return failure
  }
  if (event.reason === 'boot-failure') {
    const failure = record.bootError || `exited with ${howExited(event)} before it was ready`
    log.error(`worker ${record.id} failed to boot: ${failure}`, where)
    return failure
  }
  if (event.reason === 'crash') {
    const failure = `exited unexpectedly with ${howExited(event)}`
    log.warn(`worker ${record.id} crashed: ${failure}`, where)
    return failure
  }
  if (event.reason === 'hang') {
    // Killed by the primary, but a failure all the same: the breaker's message must say what it was.
    const failure = record.retireDetail || 'killed: it sent no heartbeat (hung)'
    log.warn(`worker ${record.id} was killed as hung: ${failure}`, where)
    return failure
  }
  if (record.endedMidDrain() && !event.signal) {
    // Not a clean stop: the app ended its process in the middle of the drain.
    const inFlight = record.heartbeat && record.heartbeat.inFlight > 0 ? ` (${record.heartbeat.inFlight} at its last heartbeat)` : ''
    log.warn(`worker ${record.id} exited (${event.reason}) with code ${event.code} before it finished draining: the app ended its own process ` +
      `(process.exit() in its own signal handler?), cutting any request still in flight${inFlight}. ` +
      'Close the server its listen() returned instead, server.close(() => process.exit(0)): clusterize calls back once the requests are answered', where)
    return null
  }
  log.info(`worker ${record.id} exited (${event.reason})`, { pid: record.pid, code: event.code, signal: event.signal || undefined })
  return null
}

/** What an operator can do about a failed fork. */
function forkHint (code) {
  if (code === 'EMFILE' || code === 'ENFILE') return ' (the primary is out of file descriptors: raise `ulimit -n`, LimitNOFILE=); retrying with backoff'
  if (code === 'EAGAIN' || code === 'ENOMEM') return ' (out of processes or memory: check `ulimit -u`, TasksMax=, free memory); retrying with backoff'
  return '; retrying with backoff'
}

/** 'SIGKILL' or 'code 1' */
function howExited (event) {
  return event.signal || 'code ' + event.code
}

module.exports = { waitAllReady, waitReady, survives, describeExit, howExited, logExit }
