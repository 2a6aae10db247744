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
 *   new -> old  ready     its workers are ready (it accepts nothing yet); recovery: 1 if it takes the socket.io state
 *   old -> new  sessions  the cluster store's sessions, in batches
 *   old -> new  recovery  socket.io recovery state, in batches (lib/realtime/recovery-handover.js)
 *   old -> new  state     every other service's state, then state-end (./handover.js); from then
 *                         on the old workers' calls to those services are passed through (svc,
 *                         svc-exit; new -> old svc-reply)
 *   old -> new  go        start accepting
 *   new -> old  serving   it accepts, owns the pid file and the control socket
 *   old -> new  op        a session request of the old workers (numbered `n`): from the
 *                         handover on, the new primary's store answers both generations
 *   new -> old  answer    the answer to request `n` (lib/primary/session-forward.js)
 *   old <-> new sio       socket.io recovery relayed until the old one exits: its workers'
 *                         broadcasts, persists and restores up, the numbered packets down
 *   new -> old  failed    why it could not start
 *
 * Only after `serving` does the old primary stop accepting and drain its
 * workers as a shutdown does (WebSockets closed with 1012), then it exits.
 * If the new one fails before that (exits, times out, cannot be started),
 * it is killed and the old one keeps serving; the result says why.
 */

const { spawn } = require('child_process')
const debug = require('debug')('clusterize:upgrade')
const { readInherited, UPGRADE_ENV } = require('./inherit')
const recoveryHandover = require('../realtime/recovery-handover')
const { passSessionRequests, answerPassedRequest } = require('./session-forward')
const { handOverServices, takeOverServices } = require('./handover')

const TAG = '$czUpgrade'
const SESSION_BATCH = 1000

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
 * @param {{ config: object, log: object, emit: Function, sockets: () => object, sessions: () => object|undefined,
 *   recovery?: () => object|undefined, services?: () => object, isShuttingDown: () => boolean, retire: (reason: string) => Promise<{ code: number }> }} deps
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
    const backend = deps.sessions()
    let passing = null
    // Saves the workers answered under a read lease are applied before the snapshot, and none is answered early after it.
    if (backend && backend.leases) await backend.leases.suspend()
    if (backend) {
      const entries = backend.snapshot()
      for (let i = 0; i < entries.length; i += SESSION_BATCH) child.send({ [TAG]: 'sessions', entries: entries.slice(i, i + SESSION_BATCH) })
      // Old workers keep serving their in-flight and keep-alive requests while they drain.
      passing = passSessionRequests(child, backend, TAG)
      debug('handed %d sessions to %d', entries.length, child.pid)
    }
    // A new primary of a clusterize without the handover (a downgrade) would drop what is relayed to it.
    const recovery = ready.message.recovery === 1 ? handOverRecovery(child) : null
    // Rate limits, singleton leases, cron claims, metrics: one mechanism (./handover.js).
    const carried = deps.services ? handOverServices(deps.services(), child, TAG) : null
    child.send({ [TAG]: 'go' })
    const serving = await waitFor(child, 'serving', config.upgrade.timeoutMs)
    if (!serving.ok) {
      if (passing) passing.stop()
      if (backend && backend.leases) backend.leases.resume()
      if (recovery) recovery.cancel()
      if (carried) carried.stop()
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

  /**
   * socket.io recovery state to the new primary, then relayed to it until
   * this primary exits (or the new one goes away: this one numbers again).
   */
  function handOverRecovery (child) {
    const service = deps.recovery ? deps.recovery() : undefined
    if (!service) return null
    const send = (kind, x) => { if (child.connected) child.send({ [TAG]: kind, x }, unsent) }
    let handover
    try {
      handover = recoveryHandover.handOver(service, { send, serialization: config.bus.serialization })
    } catch (err) {
      // The upgrade goes on without it: the new primary numbers afresh (its clients connect as new sockets).
      service.relay = null
      log.error(`upgrade: the socket.io recovery state could not be handed over: ${err.message}`, { pid: process.pid })
      return null
    }
    const onMessage = (message) => { if (message && message[TAG] === 'sio') handover.onMessage(message.x) }
    child.on('message', onMessage)
    child.once('disconnect', function newPrimaryGone () {
      child.removeListener('message', onMessage)
      handover.cancel()
    })
    return handover
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
 * The new primary's side: report ready, take the sessions and the socket.io
 * recovery state, wait for `go`.
 * Resolves when it may accept. If the old primary is gone before `go`
 * (killed), this one serves anyway: it holds the sockets now.
 * @param {{ log: object, sessions: () => object|undefined, recovery?: () => object|undefined, services?: () => object, generation: number }} deps
 *   services: the service host, holding its handed-over services' calls (./handover.js holdForHandover)
 * @returns {Promise<void>}
 */
function awaitGo (deps) {
  return new Promise((resolve) => {
    const backend = deps.sessions()
    const service = deps.recovery ? deps.recovery() : undefined
    const recovery = service ? recoveryHandover.takeOver(service, { send: (kind, x) => send({ [TAG]: kind, x }) }) : null
    const carried = deps.services ? takeOverServices(deps.services(), send, TAG) : null
    let taken = 0
    let going = false
    function onMessage (message) {
      if (!message || typeof message !== 'object') return
      if (carried && carried.onMessage(message)) return
      if (message[TAG] === 'sessions' && backend && Array.isArray(message.entries)) taken += backend.restore(message.entries)
      else if (message[TAG] === 'op' && backend && typeof message.n === 'number') answerPassedRequest(backend, message.msg, (answer) => send(Object.assign({ [TAG]: 'answer', n: message.n }, answer)))
      // From an old primary of an earlier version, which applies writes itself and forwards them.
      else if (message[TAG] === 'write' && backend) answerPassedRequest(backend, message.msg, noAnswer)
      else if (message[TAG] === 'recovery' && recovery) recovery.onRecovery(message.x)
      else if (message[TAG] === 'sio' && recovery) recovery.onRelay(message.x)
      else if (message[TAG] === 'go') {
        debug('go: %d sessions taken over', taken)
        going = true
        // An old primary of an earlier version sends no state: these services start empty.
        if (carried) carried.release()
        if (recovery) recovery.go()
        resolve()
      }
    }
    function onOldGone () {
      process.removeListener('message', onMessage)
      if (carried) carried.oldGone()
      if (recovery) recovery.oldGone()
      if (going) return
      deps.log.warn(`upgrade: the old primary ${readInherited().from} went away before handing over; serving on the inherited sockets`, { pid: process.pid })
      resolve()
    }
    // Gone while the workers booted (killed): nobody else serves, so this one does.
    if (typeof process.send !== 'function' || !process.connected) return onOldGone()
    process.on('message', onMessage)
    process.once('disconnect', onOldGone)
    send({ [TAG]: 'ready', node: process.version, generation: deps.generation, recovery: recovery ? 1 : 0 })
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

function noAnswer () {}

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
