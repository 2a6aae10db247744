'use strict'

/**
 * `clusterize app.js [flags]`: runs in the primary and, because workers
 * re-run the same script with the same argv, in every worker too. Both build
 * the same options; only the primary checks and writes the pid file and
 * prints the banner.
 */

const cluster = require('cluster')
const fs = require('fs')
const path = require('path')
const debug = require('debug')('clusterize:cli')
const { clusterize } = require('../index')
const { resolveConfig } = require('../config')
const { ClusterizeOptionError } = require('../errors')
const { formatBanner } = require('./banner')
const { buildOptions, CliUsageError } = require('./args')
const { isEcosystemFile, applyEcosystem, mergeOptions } = require('./ecosystem')
const { CliRuntimeError } = require('./errors')
const { createJsonLogger } = require('./json-logger')
const { writeSafely } = require('../safe-write')
const pidFile = require('./pid-file')
const { writeMainPid, removeMainPid } = require('./main-pid-file')
const { pidFilePath } = require('./control')
const { ensurePrivateDir, runtimeDirNotice } = require('./runtime-dir')
const { startControlServer } = require('./control-server')
const { readInherited } = require('../primary/inherit')
const upgrades = require('../primary/upgrade')
const { version } = require('./help')

/**
 * Start the app. Resolves once the primary is ready (or at once in a worker).
 * Usage and option errors throw CliUsageError (exit code 2) before any fork.
 * @param {{ app: string, flags: object }} parsed from parseArgs
 * @param {{ stdout: object, stderr: object, env: object }} io
 * @returns {Promise<void>}
 */
async function start (parsed, io) {
  const ecosystem = isEcosystemFile(parsed.app) ? applyEcosystem(parsed, io.env) : null
  for (const flag of ['env', 'only']) {
    if (!ecosystem && parsed.flags[flag] !== undefined) {
      throw new CliUsageError(`--${flag} applies to PM2 ecosystem files only (clusterize ecosystem.config.js --${flag} NAME); ${parsed.app} is an app file` +
        (flag === 'env' ? ': set its variables in the environment instead' : ''))
    }
  }
  if (ecosystem) parsed = ecosystem.parsed
  const { flags } = parsed
  const appPath = path.resolve(parsed.app)
  const options = buildOptions(flags, io.env)
  if (ecosystem) mergeOptions(options, ecosystem.options)
  // The app's session store reads REDIS_URL (session({ store: 'auto' })).
  if (options.bus && typeof options.bus.redis === 'string') io.env.REDIS_URL = options.bus.redis
  if (flags.json) options.logger = createJsonLogger(io.stdout, roleFields())
  // The CLI prints its own banner (with the pid file) at ready.
  options.banner = false

  if (isClusterizeWorker()) {
    clusterize(appPath, options)
    return
  }

  const config = validate(options, flags, io.env)
  if (ecosystem && ecosystem.ignored.length > 0) {
    io.stderr.write(`clusterize: ${ecosystem.file}: ignoring what clusterize has no use for: ${ecosystem.ignored.join(', ')} (see docs/coming-from-pm2.md)\n`)
  }
  checkAppFile(appPath, parsed.app)
  const file = pidFilePath(flags, io.env)
  const notice = flags.pidFile ? null : runtimeDirNotice(io.env)
  if (notice) io.stderr.write(`clusterize: ${notice}\n`)
  preparePidFileDir(file, !flags.pidFile)
  // A primary started by `clusterize upgrade` takes over the pid file of the one it replaces.
  const inherited = readInherited()
  refuseIfRunning(file, inherited.source === 'upgrade' ? inherited.from : null)

  const startedAt = Date.now()
  const handle = clusterize(appPath, options)
  const mainPidFile = flags.mainPidFile ? path.resolve(flags.mainPidFile) : null
  process.on('exit', function onExit () {
    pidFile.removePidFile(file, process.pid)
    if (mainPidFile) removeMainPid(mainPidFile, process.pid)
  })
  // Replacing a primary: the pid file and the control socket become this
  // one's before the old one is told to drain (handle.ready waits for it).
  if (inherited.source === 'upgrade') upgrades.onTakeover((ready) => takeOver(ready))
  let info
  try {
    info = await handle.ready
  } catch (err) {
    // The primary has already logged why the app cannot load.
    if (err.code !== 'ERR_CLUSTERIZE_APP_INVALID') io.stderr.write(`clusterize: could not start ${parsed.app}: ${err.message}\n`)
    const result = await handle.shutdown().catch(() => null)
    debug('shutdown after failed start: %o', result)
    process.exit(1)
  }
  if (inherited.source !== 'upgrade') await takeOver(info)
  await waitForHeartbeats(handle, Math.min(2000, config.health.heartbeatMs * 2))
  const stats = handle.stats()
  if (flags.json) {
    options.logger.info({ port: info.port, probesPort: info.probesPort || null, pidFile: file, workers: stats.workers.map((w) => ({ id: w.id, pid: w.pid, generation: w.generation, state: w.state })) }, 'ready')
  } else {
    writeSafely(io.stdout, formatBanner(stats, {
      version,
      app: parsed.app,
      host: config.host,
      probesPort: info.probesPort,
      probesHost: config.probes && config.probes.host,
      dashboard: Boolean(config.probes && config.probes.dashboard),
      redis: config.bus.redis,
      pidFile: shortPath(file),
      startupMs: Date.now() - startedAt,
      color: Boolean(io.stdout.isTTY) && !io.env.NO_COLOR
    }) + '\n')
  }

  /** Answer on the control socket (the inherited one after an upgrade), then write the pid file. */
  async function takeOver (ready) {
    const control = await startControlServer(file + '.sock', handle, { fd: inherited.control }).catch((err) => {
      io.stderr.write(`clusterize: no control socket (${err.message}); clusterize reload falls back to the signal\n`)
      return null
    })
    if (control) {
      process.on('exit', control.close)
      upgrades.registerControl(control)
    }
    writeInfo(control, ready)
  }

  function writeInfo (control, info) {
    // The bare pid first: the pid file is what `clusterize status`/`reload` (and the tests) wait
    // for, so by the time it appears the main pid file already names this primary.
    if (mainPidFile) writeMainPid(mainPidFile, process.pid)
    pidFile.writePidFile(file, {
      pid: process.pid,
      controlSocket: control ? control.path : null,
      reloadSignal: config.reload.signal || null,
      port: info.port,
      host: config.host || null,
      probesPort: info.probesPort || null,
      probesHost: info.probesPort ? config.probes.host : null,
      app: appPath,
      script: path.basename(process.argv[1]),
      workers: config.workers,
      startedAt: new Date(startedAt).toISOString(),
      // Which process this is, for good (Linux): `stop` and the reload signal need it or the socket.
      ...pidFile.processIdentity(process.pid)
    })
  }
}

const ENV_FALLBACKS = { port: 'PORT', workers: 'WORKERS', host: 'HOST' }

/** Validate every option now, so mistakes exit with code 2 before a fork. */
function validate (options, flags, env) {
  try {
    return resolveConfig(options, env)
  } catch (err) {
    if (!(err instanceof ClusterizeOptionError)) throw err
    let message = err.message.replace(/^clusterize: /, '')
    const envName = ENV_FALLBACKS[err.option]
    if (envName && flags[err.option] === undefined && env[envName]) message += ` (from the environment variable ${envName})`
    throw new CliUsageError(message)
  }
}

function checkAppFile (appPath, given) {
  try {
    require.resolve(appPath)
  } catch {
    throw new CliUsageError(`cannot find the app file ${JSON.stringify(given)} (looked for ${appPath})`)
  }
}

/**
 * The default directory is created private (0700); a --pid-file directory
 * must at least keep other users from replacing the file. Checked before
 * anything forks.
 */
function preparePidFileDir (file, isDefault) {
  try {
    if (isDefault) ensurePrivateDir(path.dirname(file))
    pidFile.checkPidFileDir(file)
  } catch (err) {
    throw new CliUsageError(err.code ? `cannot create the pid file's directory: ${err.message}` : err.message)
  }
}

/** Relative to the working directory when it is inside it. */
function shortPath (file) {
  const relative = path.relative(process.cwd(), file)
  return relative && !relative.startsWith('..') && !path.isAbsolute(relative) ? relative : file
}

/**
 * Two primaries sharing one pid file would make reload/stop ambiguous.
 * @param {string} file
 * @param {number|null} replacing the pid of the primary this one replaces (upgrade)
 */
function refuseIfRunning (file, replacing) {
  let existing
  try {
    existing = pidFile.readPidFile(file)
  } catch (err) {
    throw new CliUsageError(`${err.message}; choose another --pid-file`)
  }
  if (!existing) return
  if (existing.pid === replacing) return
  if (pidFile.isPrimaryAlive(existing)) {
    throw new CliRuntimeError(`already running: primary pid ${existing.pid} owns ${file}. ` +
      'Stop it with `clusterize stop`, or give this instance its own --pid-file.')
  }
  debug('replacing stale pid file %s (pid %d is gone)', file, existing.pid)
}

/**
 * Wait (bounded) until every worker has sent a heartbeat, so the banner can
 * say which session store the app uses.
 */
function waitForHeartbeats (handle, timeoutMs) {
  const deadline = Date.now() + timeoutMs
  return new Promise((resolve) => {
    (function poll () {
      const workers = handle.stats().workers
      if (workers.every((w) => w.heartbeat) || Date.now() >= deadline) return resolve()
      setTimeout(poll, 20).unref()
    })()
  })
}

/** The same test lib/index.js uses: a worker forked by a clusterize primary. */
function isClusterizeWorker () {
  return cluster.isWorker && process.env.CLUSTERIZE_WORKER_ID !== undefined
}

function roleFields () {
  if (!isClusterizeWorker()) return { role: 'primary' }
  return { role: 'worker', worker: Number(process.env.CLUSTERIZE_WORKER_ID), generation: Number(process.env.CLUSTERIZE_GENERATION) || 1 }
}

module.exports = { start }
