'use strict'

/**
 * Replace the primary itself without dropping a connection (`clusterize
 * upgrade`, the upgrade signal), as unicorn's and gunicorn's USR2 do.
 *
 * The old primary starts a new one from what is on disk now (the node
 * binary at process.execPath or the one given, the same script and
 * arguments, so options resolve as at a first start) and passes it its
 * listening sockets as descriptors in stdio: the HTTP socket (for
 * 'rr'/'sticky', or an inherited one for 'none'), the probes socket and the
 * CLI's control socket. The new primary does not bind; the sockets never
 * close, so no connection is refused. Over the IPC channel between them:
 *
 *   new -> old  ready     its workers are ready (it accepts nothing yet); handover: 1, it takes
 *                         the state by ./handover.js
 *   old -> new  state     every service's state (sessions, socket.io recovery, rate limits,
 *                         singleton leases, cron claims, metrics), then state-end (./handover.js);
 *                         from then on the old workers' calls to those services are passed
 *                         through (svc, svc-exit; new -> old svc-reply, svc-down)
 *   old -> new  go        start accepting
 *   new -> old  serving   it accepts, owns the pid file and the control socket
 *   new -> old  failed    why it could not start
 * An old primary of clusterize 0.2.0 sends `sessions` (the store's sessions, in batches)
 * and then `write` (each session write it applied), and hands over its socket.io
 * recovery state only to a new primary whose `ready` says `recovery: 1` (this one
 * does not: its clients reconnect as new sockets).
 *
 * Only after `serving` does the old primary stop accepting and drain its
 * workers as a shutdown does (WebSockets closed with 1012), then it exits.
 * If the new one fails before that (exits, times out, cannot be started),
 * it is killed and the old one keeps serving; the result says why.
 */

const { spawn } = require('child_process')
const debug = require('debug')('clusterize:upgrade')
const { readInherited, UPGRADE_ENV } = require('./inherit')
const { prepareServices, handOverServices } = require('./handover')
const { takeOverServices } = require('./handover-take')
const { SERVICE: SESSION_SERVICE } = require('../session/cluster-service')

const TAG = '$czUpgrade'
/** An old primary of an earlier clusterize (0.2.0) passes its session writes with no caller. */
const EARLIER_PRIMARY = Object.freeze({ id: 0, pid: 0, generation: 0, passed: true })

/** Hooks the CLI registers in this process (one primary per process). */
const hooks = { control: null, takeover: [] }

/**
 * The CLI's control socket: passed on to the new primary, released (closed
 * without removing the file) once the new one serves on it.
 * @param {{ descriptor: () => number|null, release: () => void }|null} control
 */
function registerControl (control) {
  hooks.control = control
}

/**
 * In a new primary: run `fn` once it accepts and before it tells the old one
 * it serves (the CLI writes the pid file and answers on the control socket).
 * @param {(info: object) => Promise<void>|void} fn
 */
function onTakeover (fn) {
  hooks.takeover.push(fn)
}

/**
 * The old primary's side.
 * @param {{ config: object, log: object, emit: Function, sockets: () => object, services: () => object,
 *   isShuttingDown: () => boolean, retire: (reason: string) => Promise<{ code: number }> }} deps
 *   `sockets()` resolves `{ http, probes, port, portOption, error, release }`: descriptors, or why the
 *   HTTP socket cannot be passed; release() closes what was borrowed for the handover
 * @returns {{ upgrade: (options?: { node?: string, args?: string[] }) => Promise<object>, abort: () => void }}
 */
function createUpgrader (deps) {
  const { config, log } = deps
  let running = null
  let pending = null

  /**
   * @param {{ node?: string, args?: string[] }} [options] `node`: the binary to run
   *   (default process.execPath, read anew); `args`: start flags appended to the old ones
   * @returns {Promise<{ ok: boolean, reason?: string, pid: number, previousPid: number, node?: string, durationMs: number }>}
   */
  function upgrade (options) {
    if (running) return running
    const startedAt = Date.now()
    running = run(options || {}).catch((err) => {
      // A bug here must not leave `running` settled as a rejection for every later upgrade.
      log.error(`upgrade failed, primary ${process.pid} keeps serving: ${err.message}`)
      return { ok: false, reason: err.message, pid: process.pid, previousPid: process.pid, durationMs: Date.now() - startedAt }
    }).then((result) => {
      if (!result.ok) running = null
      deps.emit('upgrade:done', result)
      return result
    })
    return running
  }

  async function run (options) {
    const startedAt = Date.now()
    const failed = (reason) => {
      log.error(`upgrade failed, primary ${process.pid} keeps serving: ${reason}`)
      return { ok: false, reason, pid: process.pid, previousPid: process.pid, durationMs: Date.now() - startedAt }
    }
    const refusal = refuse()
    if (refusal) return failed(refusal)
    const sockets = await deps.sockets()
    if (sockets.error) {
      sockets.release()
      return failed(sockets.error)
    }
    const fds = { http: sockets.http, probes: sockets.probes, control: hooks.control ? hooks.control.descriptor() : null }
    const execPath = options.node || process.execPath
    const args = process.execArgv.concat(process.argv.slice(1), options.args || [])
    const stdio = ['ignore', 'inherit', 'inherit', 'ipc']
    const passed = {}
    for (const role of Object.keys(fds)) {
      if (fds[role] === null || fds[role] === undefined) continue
      passed[role] = stdio.length
      stdio.push(fds[role])
    }
    const env = Object.assign({}, process.env, { [UPGRADE_ENV]: JSON.stringify({ from: process.pid, fds: passed, port: sockets.port, portOption: sockets.portOption }) })
    deps.emit('upgrade:start', { node: execPath })
    log.info(`upgrade: starting a new primary (${execPath})`, { pid: process.pid })
    let child
    try {
      child = spawn(execPath, args, { stdio, env, cwd: process.cwd() })
    } catch (err) {
      return failed(`cannot start ${execPath}: ${err.message}`)
    } finally {
      // The child has its own copies now.
      sockets.release()
    }
    pending = child
    // No pid: the spawn failed and waitFor reports its error.
    if (child.pid) log.info(`upgrade: new primary ${child.pid} started; waiting for it to be ready`, { pid: process.pid })
    const ready = await waitFor(child, 'ready', config.upgrade.timeoutMs)
    if (!ready.ok) return abandon(child, failed(ready.reason))
    const host = deps.services()
    let prepared = null
    let carried = null
    try {
      // The saves the workers answered under a session read lease are applied before the snapshot.
      prepared = await prepareServices(host)
      // Every service's state, then the old workers' calls passed on while they drain (./handover.js).
      carried = handOverServices(host, child, TAG, { serialization: config.bus.serialization, successor: ready.message })
    } catch (err) {
      // A service that cannot export (a bug) must not leave its state half handed over: this primary goes on as it was.
      if (prepared !== null) prepared.resume()
      return abandon(child, failed(`the state could not be handed over: ${err.message}`))
    }
    if (carried.earlier) {
      log.warn(`upgrade: the new primary ${child.pid} is an earlier clusterize (0.2.0): it takes the sessions, and the session writes of this primary's workers while they drain, as 0.2.0 did; ` +
        'a client whose requests alternate between old and new workers meanwhile may read an older copy, and rate limits, singleton leases, cron claims, metrics and socket.io recovery start empty there', { pid: process.pid })
    }
    child.send({ [TAG]: 'go' })
    const serving = await waitFor(child, 'serving', config.upgrade.timeoutMs)
    if (!serving.ok) {
      carried.stop()
      prepared.resume()
      return abandon(child, failed(serving.reason))
    }
    pending = null
    // From here on the new primary serves: let go of what it now owns.
    if (hooks.control) hooks.control.release()
    child.unref()
    if (child.channel && typeof child.channel.unref === 'function') child.channel.unref()
    const result = { ok: true, pid: child.pid, previousPid: process.pid, node: ready.message.node, generation: ready.message.generation, durationMs: Date.now() - startedAt }
    log.info(`upgrade done: primary ${child.pid} (Node ${result.node}) serves; primary ${process.pid} drains and exits`, { pid: process.pid })
    setImmediate(() => {
      deps.retire('upgrade').then((outcome) => {
        if (child.connected) child.disconnect()
        setImmediate(() => process.exit(outcome.code))
      })
    })
    return result
  }

  /** Why this primary cannot be replaced now, or null. */
  function refuse () {
    if (process.pid === 1) {
      return 'this primary is PID 1 (a container): a new primary cannot take over its pid and the container would end with it. ' +
        'Roll out a new container instead (rolling update), or run clusterize under a small init (tini, dumb-init, docker run --init) and upgrade there'
    }
    if (deps.isShuttingDown()) return 'shutting down'
    return null
  }

  /** The new primary failed: kill it (its workers exit with its IPC channel) and keep serving. */
  function abandon (child, result) {
    pending = null
    if (child.exitCode === null && child.signalCode === null) {
      try { child.kill('SIGKILL') } catch {}
    }
    return result
  }

  /** A shutdown during an upgrade: the half-started new primary goes with it. */
  function abort () {
    if (pending) abandon(pending, null)
  }

  return { upgrade, abort }
}

/**
 * Resolve with the new primary's `kind` message, or with why it will not come.
 * @returns {Promise<{ ok: true, message: object }|{ ok: false, reason: string }>}
 */
function waitFor (child, kind, timeoutMs) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => done({ ok: false, reason: `the new primary (pid ${child.pid}) did not report ${kind} within ${timeoutMs} ms (upgrade.timeoutMs)` }), timeoutMs)
    function done (outcome) {
      clearTimeout(timer)
      child.removeListener('message', onMessage)
      child.removeListener('exit', onExit)
      child.removeListener('error', onError)
      resolve(outcome)
    }
    function onMessage (message) {
      if (!message || typeof message !== 'object') return
      if (message[TAG] === kind) done({ ok: true, message })
      else if (message[TAG] === 'failed') done({ ok: false, reason: `the new primary could not start: ${String(message.reason).slice(0, 2000)}` })
    }
    function onExit (code, signal) {
      done({ ok: false, reason: `the new primary (pid ${child.pid}) exited (${signal ? 'signal ' + signal : 'code ' + code}) before it was ${kind === 'ready' ? 'ready' : 'serving'}` })
    }
    function onError (err) {
      done({ ok: false, reason: `cannot start ${child.spawnfile}: ${err.message}` })
    }
    child.on('message', onMessage)
    child.once('exit', onExit)
    child.once('error', onError)
  })
}

/**
 * The new primary's side: report ready, take every service's state
 * (./handover.js), wait for `go`.
 * Resolves when it may accept. If the old primary is gone before `go`
 * (killed), this one serves anyway: it holds the sockets now.
 * @param {{ log: object, services: () => object, serialization: 'json'|'advanced', generation: number }} deps
 *   services: the service host, holding its handed-over services' calls (./handover.js holdForHandover);
 *   serialization: this primary's bus.serialization
 * @returns {Promise<void>}
 */
function awaitGo (deps) {
  return new Promise((resolve) => {
    const host = deps.services()
    const carried = takeOverServices(host, send, TAG, { serialization: deps.serialization })
    let going = false
    function onMessage (message) {
      if (!message || typeof message !== 'object') return
      if (carried.onMessage(message)) return
      // From an old primary of clusterize 0.2.0: the sessions, then each write it applied itself.
      if (message[TAG] === 'sessions' && Array.isArray(message.entries)) host.importState(SESSION_SERVICE, message.entries)
      else if (message[TAG] === 'write' && message.msg && typeof message.msg.op === 'string') host.call(SESSION_SERVICE, message.msg.op, message.msg, EARLIER_PRIMARY).catch(earlierWriteFailed)
      else if (message[TAG] === 'go') {
        debug('go')
        going = true
        // An old primary of an earlier clusterize sends no state: these services start empty.
        carried.release()
        resolve()
      }
    }
    function onOldGone () {
      process.removeListener('message', onMessage)
      carried.oldGone()
      if (going) return
      deps.log.warn(`upgrade: the old primary ${readInherited().from} went away before handing over; serving on the inherited sockets`, { pid: process.pid })
      resolve()
    }
    // Gone while the workers booted (killed): nobody else serves, so this one does.
    if (typeof process.send !== 'function' || !process.connected) return onOldGone()
    process.on('message', onMessage)
    process.once('disconnect', onOldGone)
    send({ [TAG]: 'ready', node: process.version, generation: deps.generation, handover: carried.version })
  })
}

/**
 * The new primary accepts: run the takeover hooks (pid file, control socket),
 * then tell the old one it may drain.
 * @param {object} info what handle.ready resolves with
 */
async function announceServing (info) {
  for (const fn of hooks.takeover) await fn(info)
  send({ [TAG]: 'serving', pid: process.pid })
  // The old primary disconnects once it has drained; nothing keeps this process up for it.
  if (process.channel && typeof process.channel.unref === 'function') process.channel.unref()
}

/**
 * Tell the old primary why this one cannot start, then call `then`.
 * @param {string} reason
 * @param {() => void} [then]
 */
function reportFailure (reason, then) {
  if (typeof process.send !== 'function' || !process.connected) return then && then()
  process.send({ [TAG]: 'failed', reason }, () => then && then())
}

function earlierWriteFailed (err) {
  debug('a session write of the earlier primary failed here: %s', err && err.message)
}

function send (message) {
  if (typeof process.send === 'function' && process.connected) process.send(message, unsent)
}

/**
 * A write to the other primary that failed (EPIPE: it exited meanwhile). With
 * a callback the error comes here instead of as an 'error' event, which
 * nothing handles and which would end this primary.
 */
function unsent (err) {
  if (err) debug('not sent to the other primary: %s', err.message)
}

module.exports = { createUpgrader, awaitGo, announceServing, reportFailure, registerControl, onTakeover }
