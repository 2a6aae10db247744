'use strict'

/**
 * `clusterize reload | upgrade | scale | stop | status`: find the running primary through its
 * pid file (or, for status, a probes port) and signal or query it.
 */

const fs = require('fs')
const http = require('http')
const path = require('path')
const debug = require('debug')('clusterize:cli')
const { formatWorkersTable, formatSingletonsTable } = require('./banner')
const { LEGACY_PID_FILE } = require('./args')
const pidFile = require('./pid-file')
const { defaultPidFile, fallbackPidFile } = require('./runtime-dir')
const { sendControl } = require('./control-server')
const { isAlive } = require('../process-alive')
const { RELOAD_SIGNALS, UPGRADE_SIGNALS } = require('../signals')
const { CliRuntimeError } = require('./errors')

const POLL_MS = 100
const STATUS_TIMEOUT_MS = 5000
/** After a control connection closed without an answer: how long to wait to see whether the primary exited. */
const EXIT_CHECK_MS = 3000
/** Connect errors that mean "no control socket here": fall back to signals and probes. */
const UNREACHABLE = new Set(['ENOENT', 'ECONNREFUSED', 'ENOTSOCK'])

/**
 * The pid file the flags name, or the default one for this directory.
 * @param {object} flags
 * @param {NodeJS.ProcessEnv} [env]
 * @returns {string} an absolute path
 */
function pidFilePath (flags, env) {
  return flags.pidFile ? path.resolve(flags.pidFile) : defaultPidFile(env || process.env, process.cwd(), flags.only)
}

/**
 * Find the live primary described by the pid file.
 * @param {object} flags
 * @param {NodeJS.ProcessEnv} [env]
 * @returns {{ file: string, info: object }}
 * @throws {CliRuntimeError} no pid file, one that cannot be trusted, or a
 *   stale one (which is removed)
 */
function findPrimary (flags, env) {
  let file = pidFilePath(flags, env)
  let info = readTrusted(file)
  // A primary started while the shared default directory was squatted keeps its file in the fallback.
  const fallback = !info && !flags.pidFile ? fallbackPidFile(env || process.env, process.cwd()) : null
  if (fallback) {
    const found = readTrusted(fallback)
    if (found) {
      file = fallback
      info = found
    }
  }
  if (!info) {
    // 0.1 wrote ./clusterize.pid by default: point at it rather than guess.
    const legacy = !flags.pidFile && fs.existsSync(LEGACY_PID_FILE)
      ? ` There is a ${LEGACY_PID_FILE} here (the old default): --pid-file ${LEGACY_PID_FILE}`
      : ' Pass the one it was started with: --pid-file F'
    throw new CliRuntimeError(`no pid file at ${file}: is clusterize running from this directory?${legacy}`)
  }
  if (!pidFile.isPrimaryAlive(info)) {
    const why = isAlive(info.pid)
      ? `pid ${info.pid} now belongs to another program`
      : `process ${info.pid} is not running any more (killed, or crashed without cleaning up)`
    pidFile.removePidFile(file, info.pid)
    const socketRemoved = removeDeadPrimarySocket(file + '.sock')
    throw new CliRuntimeError(`stale pid file ${file}: ${why}; the file has been removed${socketRemoved ? ', and its control socket too' : ''}`)
  }
  return { file, info }
}

/** readPidFile, with its refusals as the CLI's errors. */
function readTrusted (file) {
  try {
    return pidFile.readPidFile(file)
  } catch (err) {
    throw new CliRuntimeError(err.message)
  }
}

/**
 * Before a signal goes to the pid a file names, the process behind it must be
 * shown to be that primary by what only the primary holds: its control socket
 * (a socket of this user or root) answers with the same pid, or, on Linux,
 * the process has the start time (and boot) the primary recorded in its pid
 * file, which a process that got the pid later cannot have. A pid file alone,
 * however well owned, may be stale with its pid now someone else's, and a
 * probes port is anyone's once the primary is gone: neither is proof.
 * @param {object} info from readPidFile
 * @returns {Promise<void>}
 * @throws {CliRuntimeError} when nothing confirms it
 */
async function confirmPrimary (info) {
  let socketWhy = 'the pid file records no control socket'
  if (info.controlSocket && !ownSocket(info.controlSocket)) socketWhy = `its control socket ${info.controlSocket} is gone`
  if (info.controlSocket && ownSocket(info.controlSocket)) {
    const reply = await sendControl(info.controlSocket, { cmd: 'status' }, STATUS_TIMEOUT_MS).catch((err) => err)
    if (reply && reply.ok && reply.result && reply.result.pid === info.pid) return
    if (reply && !(reply instanceof Error)) throw notConfirmed(info, `its control socket answers for pid ${reply.result && reply.result.pid}`)
    socketWhy = `its control socket ${info.controlSocket} does not answer (${reply.code || reply.message})`
  }
  const identity = pidFile.sameProcess(info)
  if (identity.same) return
  throw notConfirmed(info, `${socketWhy}, and ${identity.why}`)
}

function notConfirmed (info, why) {
  return new CliRuntimeError(`not signalling pid ${info.pid}: it is not confirmed to be the clusterize primary (${why}). ` +
    `If it is, signal it yourself after checking \`ps -p ${info.pid} -o args\`; if the pid file is stale, remove it`)
}

/**
 * The control socket a dead primary left (kill -9 runs no exit handler).
 * Removed only when it is a socket and ours (this user's or root's): the
 * primary that listened on it is gone, and a primary that took over by
 * `clusterize upgrade` would have rewritten the pid file first. Anything
 * else at that path is left alone.
 * @returns {boolean} whether it was removed
 */
function removeDeadPrimarySocket (socketPath) {
  if (!ownSocket(socketPath)) return false
  try {
    fs.unlinkSync(socketPath)
    return true
  } catch {
    return false
  }
}

/** A unix socket owned by this user or root: another user cannot stand in for the primary. */
function ownSocket (socketPath) {
  let stat
  try {
    stat = fs.lstatSync(socketPath)
  } catch {
    return false
  }
  if (!stat.isSocket()) return false
  return typeof process.getuid !== 'function' || stat.uid === process.getuid() || stat.uid === 0
}

/**
 * Reload through the control socket and report the reload's own result;
 * without the socket, send the primary's reload signal and, when its probes
 * server is known, wait for the reload to finish.
 * @returns {Promise<number>} exit code: 0 done, 1 rolled back or stopped
 */
async function reload (flags, io) {
  const { info } = findPrimary(flags, io.env)
  const timeoutMs = (flags.timeout || 120) * 1000
  // Fall back to the signal only when no socket answers: after a timeout the
  // reload is still running, and a signal would queue a second one.
  const reply = await askControl(info, { cmd: 'reload' }, timeoutMs)
  if (reply) return reportReload(io, flags, info, reply.result)
  const reloadSignal = info.reloadSignal || 'SIGUSR2'
  await confirmPrimary(info)
  const target = probesTarget(info)
  const before = target ? await fetchStats(target, io.env).catch(() => null) : null
  signal(info.pid, reloadSignal)
  if (!before) {
    report(io, flags, { requested: true, pid: info.pid }, `reload requested (${reloadSignal} sent to primary ${info.pid}); follow the primary's logs for the result\n`)
    return 0
  }
  const after = await poll(() => fetchStats(target, io.env).then((s) => s.reloads > before.reloads ? s : null, () => null), timeoutMs)
  if (!after) throw new CliRuntimeError(`reload still running after ${timeoutMs / 1000} s (primary ${info.pid}); check \`clusterize status\` and its logs`)
  const ok = after.generation > before.generation
  const text = ok
    ? `reload done: generation ${before.generation} -> ${after.generation}\n\n${formatWorkersTable(after.workers)}`
    : `reload failed: generation ${before.generation} keeps serving (rolled back; see the primary's logs)\n\n${formatWorkersTable(after.workers)}`
  report(io, flags, { ok, pid: info.pid, generation: after.generation, previousGeneration: before.generation, workers: after.workers }, text)
  return ok ? 0 : 1
}

/** Print a reload result from the control socket. */
async function reportReload (io, flags, info, result) {
  const stats = await sendControl(info.controlSocket, { cmd: 'status' }, 5000).then((r) => r.result, () => null)
  const table = stats ? '\n' + formatWorkersTable(stats.workers) : ''
  const stopping = !result.ok && result.reason === 'shutting down'
  const text = result.ok
    ? `reload done: generation ${result.generation}, ${result.replaced} worker(s) replaced in ${result.durationMs} ms\n${table}`
    : stopping
      ? `reload stopped: primary ${info.pid} is shutting down (SIGTERM, \`clusterize stop\` or shutdown()), so nothing was replaced\n${table}`
      : `reload ${result.rolledBack ? 'rolled back' : 'stopped'}: ${result.reason}; generation ${result.generation} keeps serving\n${table}`
  report(io, flags, Object.assign({ pid: info.pid }, result), text)
  return result.ok ? 0 : 1
}

/**
 * Replace the primary with a new one started from what is on disk now
 * (lib/primary/upgrade.js), through the control socket; without it, send the
 * upgrade signal and follow the pid file.
 * @returns {Promise<number>} exit code: 0 done, 1 the old primary keeps serving
 */
async function upgrade (flags, io) {
  const { file, info } = findPrimary(flags, io.env)
  const timeoutMs = (flags.timeout || 180) * 1000
  const request = { cmd: 'upgrade' }
  if (flags.node !== undefined) request.node = path.resolve(flags.node)
  if (flags.args !== undefined) request.args = flags.args
  const reply = await askControl(info, request, timeoutMs)
  if (reply) {
    const result = reply.result
    if (!result.ok) {
      report(io, flags, result, `upgrade failed: ${result.reason}\nprimary ${info.pid} keeps serving\n`)
      return 1
    }
    const stats = await sendControl(info.controlSocket, { cmd: 'status' }, STATUS_TIMEOUT_MS).then((r) => r.result, () => null)
    const table = stats && stats.workers ? '\n' + formatWorkersTable(stats.workers) : ''
    report(io, flags, result, `upgrade done: primary ${result.previousPid} -> ${result.pid} (Node ${result.node}) in ${result.durationMs} ms; ` +
      `primary ${result.previousPid} drains its workers and exits\n${table}`)
    return 0
  }
  if (request.node || request.args) throw new CliRuntimeError(`--node and start flags need the control socket, and primary ${info.pid} has none (${info.controlSocket || 'not recorded'})`)
  await confirmPrimary(info)
  signal(info.pid, UPGRADE_SIGNALS[0])
  const next = await poll(() => {
    let now = null
    try { now = pidFile.readPidFile(file) } catch {}
    return Promise.resolve(now && now.pid !== info.pid ? now : null)
  }, timeoutMs)
  if (!next) throw new CliRuntimeError(`no new primary took over within ${timeoutMs / 1000} s (${UPGRADE_SIGNALS[0]} sent to ${info.pid}); it may have failed: see the primary's logs`)
  report(io, flags, { ok: true, pid: next.pid, previousPid: info.pid }, `upgrade done: primary ${info.pid} -> ${next.pid}\n`)
  return 0
}

/**
 * `clusterize scale N | +N | -N`: add or retire workers through the control
 * socket (there is no signal for it), and report once the new workers are
 * ready or the retired ones have drained.
 * @returns {Promise<number>} exit code: 0 done, 1 not (the reason is printed)
 */
async function scale (flags, io) {
  const { info } = findPrimary(flags, io.env)
  const timeoutMs = (flags.timeout || 120) * 1000
  const reply = await askControl(info, Object.assign({ cmd: 'scale' }, flags.scale), timeoutMs)
  if (!reply) {
    throw new CliRuntimeError(`primary ${info.pid} has no control socket (${info.controlSocket || 'not recorded'}); scaling needs it: ` +
      'restart it with this version of clusterize, or use handle.scale(n) in a primary script')
  }
  const result = reply.result
  const stats = await sendControl(info.controlSocket, { cmd: 'status' }, STATUS_TIMEOUT_MS).then((r) => r.result, () => null)
  const table = stats && stats.workers ? '\n' + formatWorkersTable(stats.workers) : ''
  const text = result.ok
    ? `scaled from ${result.from} to ${result.to} workers in ${result.durationMs} ms\n${table}`
    : `scaling from ${result.from} to ${result.to} workers: ${result.reason}\n${table}`
  report(io, flags, Object.assign({ pid: info.pid }, result), text)
  return result.ok ? 0 : 1
}

/**
 * SIGTERM the primary and wait (bounded) for it to exit.
 * @returns {Promise<number>} exit code
 */
async function stop (flags, io) {
  const { file, info } = findPrimary(flags, io.env)
  await confirmPrimary(info)
  const started = Date.now()
  signal(info.pid, 'SIGTERM')
  const timeoutMs = (flags.timeout || 60) * 1000
  const gone = await poll(() => Promise.resolve(!isAlive(info.pid)), timeoutMs)
  if (!gone) {
    throw new CliRuntimeError(`primary ${info.pid} is still running ${timeoutMs / 1000} s after SIGTERM ` +
      `(draining long requests?). Wait, run \`clusterize stop\` again to force it, or kill -9 ${info.pid}`)
  }
  pidFile.removePidFile(file, info.pid) // normally already gone: the primary removes it
  const ms = Date.now() - started
  report(io, flags, { stopped: true, pid: info.pid, ms }, `stopped: primary ${info.pid} and its workers exited after ${ms} ms\n`)
  return 0
}

/**
 * Print the workers table, from the control socket or the probes server's /stats.
 * @returns {Promise<number>} exit code
 */
async function status (flags, io) {
  let target
  let pid = null
  if (flags.probesPort !== undefined) {
    target = { host: loopbackFor(flags.probesHost || '127.0.0.1'), port: flags.probesPort }
  } else {
    const { info } = findPrimary(flags, io.env)
    pid = info.pid
    const reply = await askControl(info, { cmd: 'status' }, STATUS_TIMEOUT_MS)
    if (reply) return printStatus(io, flags, reply.result, pid)
    target = probesTarget(info)
    if (!target) {
      throw new CliRuntimeError(`primary ${info.pid} has no probes server (single-process mode, workers 0?), so there is no status to read`)
    }
  }
  let stats
  try {
    stats = await fetchStats(target, io.env)
  } catch (err) {
    throw new CliRuntimeError(`cannot read http://${target.host}:${target.port}/stats: ${err.message}`)
  }
  return printStatus(io, flags, stats, pid)
}

/** The state line and the workers table, or the stats document with --json. */
function printStatus (io, flags, stats, pid) {
  if (flags.json) {
    io.stdout.write(JSON.stringify(stats) + '\n')
    return 0
  }
  const state = stats.shuttingDown ? 'shutting down' : stats.crashLooping ? 'CRASH LOOP' : stats.ready ? 'ready' : 'not ready'
  io.stdout.write(`primary ${stats.pid || pid}: ${state}, port ${stats.port}, scheduling ${stats.scheduling}, ` +
    `generation ${stats.generation}, ${stats.reloads} reload(s)\n\n` + formatWorkersTable(stats.workers || []))
  const singletons = formatSingletonsTable(stats.singletons)
  if (singletons !== '') io.stdout.write('\n' + singletons)
  return 0
}

/**
 * Send one command through the control socket the pid file records.
 * @returns {Promise<object|null>} the reply; null when there is no socket to
 *   reach (none recorded, file gone, nobody listening): use signals/probes
 * @throws {CliRuntimeError} the primary answered with an error, or not in time
 */
async function askControl (info, request, timeoutMs) {
  if (!info.controlSocket) return null
  let reply
  try {
    reply = await sendControl(info.controlSocket, request, timeoutMs)
  } catch (err) {
    if (UNREACHABLE.has(err.code)) {
      debug('control socket %s unreachable (%s)', info.controlSocket, err.code)
      return null
    }
    if (err.code === 'ERR_CLUSTERIZE_CLI_NO_ANSWER') throw await noAnswer(info, request.cmd)
    throw new CliRuntimeError(`primary ${info.pid}, control socket ${info.controlSocket}: ${err.message}; ` +
      'it may still be running: see `clusterize status` and the primary\'s logs')
  }
  if (!reply.ok) throw new CliRuntimeError(`primary ${info.pid} refused ${JSON.stringify(request)}: ${reply.error}`)
  return reply
}

/**
 * The control connection closed before the answer. Say what happened: the primary exited
 * during the command (SIGTERM, kill -9, a crash), or, if it still runs, that it did not answer.
 * @returns {Promise<CliRuntimeError>}
 */
async function noAnswer (info, cmd) {
  const exited = await poll(() => Promise.resolve(!isAlive(info.pid)), EXIT_CHECK_MS)
  if (!exited) {
    return new CliRuntimeError(`primary ${info.pid} closed the control connection without answering ${cmd}; it still runs: see \`clusterize status\` and its logs`)
  }
  const during = `primary ${info.pid} exited during the ${cmd} (stopped by a signal, killed, or crashed) before it could answer`
  if (cmd === 'reload') return new CliRuntimeError(`${during}: its workers finish their requests and exit, so the app is down unless something restarts it; see its logs`)
  if (cmd === 'upgrade') return new CliRuntimeError(`${during}: if the new primary had taken over it serves now (\`clusterize status\`); see the logs of both`)
  return new CliRuntimeError(`${during}; see its logs`)
}

function probesTarget (info) {
  if (!info.probesPort) return null
  return { host: loopbackFor(info.probesHost || '127.0.0.1'), port: info.probesPort }
}

/** A wildcard bind address is reached on loopback. */
function loopbackFor (host) {
  if (host === '0.0.0.0') return '127.0.0.1'
  if (host === '::') return '::1'
  return host
}

function signal (pid, name) {
  // readPidFile refuses other reload signals; this keeps it so for any caller.
  if (name !== 'SIGTERM' && !RELOAD_SIGNALS.includes(name) && !UPGRADE_SIGNALS.includes(name)) throw new CliRuntimeError(`refusing to send ${name}: not a signal clusterize uses`)
  try {
    process.kill(pid, name)
    debug('sent %s to %d', name, pid)
  } catch (err) {
    throw new CliRuntimeError(`cannot send ${name} to primary ${pid}: ${err.code === 'EPERM' ? 'permission denied (another user owns it)' : err.message}`)
  }
}

/**
 * GET /stats from a probes server.
 * @param {{ host: string, port: number }} target
 * @param {object} [env] CLUSTERIZE_DASHBOARD_TOKEN in it is sent as the probes token
 * @returns {Promise<object>}
 */
function fetchStats (target, env) {
  const token = env && env.CLUSTERIZE_DASHBOARD_TOKEN
  return new Promise((resolve, reject) => {
    const headers = token ? { Authorization: `Bearer ${token}` } : {}
    const req = http.get({ host: target.host, port: target.port, path: '/stats', headers, timeout: 5000, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => {
        if (res.statusCode === 401) return reject(new Error('HTTP 401: /stats needs the probes token; set CLUSTERIZE_DASHBOARD_TOKEN'))
        if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}`))
        try {
          resolve(JSON.parse(body))
        } catch (err) {
          reject(new Error('not JSON: ' + err.message))
        }
      })
    })
    req.on('timeout', () => req.destroy(new Error('no answer in 5 s')))
    req.on('error', reject)
  })
}

/** Call check() every POLL_MS until it resolves truthy; null at the deadline. */
function poll (check, timeoutMs) {
  const deadline = Date.now() + timeoutMs
  return new Promise((resolve, reject) => {
    (function next () {
      check().then((value) => {
        if (value) return resolve(value)
        if (Date.now() >= deadline) return resolve(null)
        setTimeout(next, POLL_MS)
      }, reject)
    })()
  })
}

function report (io, flags, json, text) {
  io.stdout.write(flags.json ? JSON.stringify(json) + '\n' : text)
}

module.exports = { reload, upgrade, scale, stop, status, findPrimary, pidFilePath, confirmPrimary, fetchStats, probesTarget, loopbackFor, CliRuntimeError }
