'use strict'

/**
 * `clusterize ecosystem.config.js`: start the app a PM2 ecosystem file
 * describes, with the fields that have a clusterize meaning translated and
 * every other field named in one warning (never silently dropped). Flags
 * given on the command line and variables already in the environment win
 * over the file. Runs in the primary and in every worker (workers re-run the
 * same argv), so reading the file must not depend on which one runs it.
 */

const fs = require('fs')
const path = require('path')
const debug = require('debug')('clusterize:cli')
const { availableCpus } = require('../cpus')
const { MAX_TIMER_MS } = require('../errors')
const { CliUsageError } = require('./errors')
const { DEFAULTS } = require('../config')
const { parseCron } = require('../primary/cron-schedule')
const { backoffDelay } = require('../primary/backoff')

/** PM2's own names; `ecosystem.config.js`, `ecosystem.json`, `prod.ecosystem.config.cjs`, `pm2.config.js`. */
const ECOSYSTEM_FILE = /(^|[.-])(ecosystem|pm2)([.-][\w.-]*)?\.(c?js|json)$/i

/** Fields read here; everything else is reported as ignored. */
const UNDERSTOOD = ['script', 'cwd', 'instances', 'exec_mode', 'max_memory_restart', 'kill_timeout', 'listen_timeout', 'wait_ready', 'env', 'instance_var',
  'name', 'cron_restart', 'max_restarts', 'min_uptime', 'exp_backoff_restart_delay', 'watch', 'ignore_watch']
/** PM2's default when a file sets min_uptime but not max_restarts. */
const PM2_MAX_RESTARTS = 16

const MEMORY_UNITS = { '': 1 / (1024 * 1024), K: 1 / 1024, M: 1, G: 1024 }

/**
 * Whether the app argument names a PM2 ecosystem file rather than an app.
 * @param {string} file
 * @returns {boolean}
 */
function isEcosystemFile (file) {
  return ECOSYSTEM_FILE.test(path.basename(file))
}

/**
 * Read the one app of an ecosystem file that clusterize runs: its only
 * app, or the one `select.only` names (PM2's `--only`), with the env block
 * `select.env` names (PM2's `--env`) applied over `env`.
 * @param {string} file as given on the command line
 * @param {{ only?: string, env?: string }} [select]
 * @returns {{ script: string, name: string|null, flags: object, options: object, env: object, instanceVar: string, ignored: string[] }}
 * @throws {CliUsageError} naming the file and the field
 */
function readEcosystem (file, select) {
  select = select || {}
  const where = path.resolve(file)
  const apps = loadApps(file, where)
  const index = pickApp(file, apps, select.only)
  const app = apps[index]
  const field = (name) => `${file}: apps[${index}].${name}`
  if (typeof app.script !== 'string' || app.script === '') throw new CliUsageError(`${field('script')} must name the app file`)
  if (app.cwd !== undefined && typeof app.cwd !== 'string') throw new CliUsageError(`${field('cwd')} must be a directory path`)

  const base = path.resolve(path.dirname(where), app.cwd || '.')
  const result = { script: path.resolve(base, app.script), name: typeof app.name === 'string' ? app.name : null, flags: {}, options: {}, env: {}, instanceVar: 'NODE_APP_INSTANCE', ignored: [] }
  if (app.instances !== undefined) result.flags.workers = instances(app.instances, field('instances'))
  if (app.exec_mode !== undefined && !/^cluster(_mode)?$/.test(app.exec_mode)) {
    // 'fork' runs separate processes; clusterize is always one primary with workers.
    result.ignored.push(`exec_mode (${JSON.stringify(app.exec_mode)}: clusterize always runs cluster mode)`)
  }
  if (app.max_memory_restart !== undefined) result.options.health = { maxMemoryMB: memoryMB(app.max_memory_restart, field('max_memory_restart')) }
  if (app.kill_timeout !== undefined) result.options.shutdown = { timeoutMs: milliseconds(app.kill_timeout, field('kill_timeout')) }
  if (app.listen_timeout !== undefined) result.options.reload = { readyTimeoutMs: milliseconds(app.listen_timeout, field('listen_timeout')) }
  if (app.env !== undefined) result.env = environment(app.env, field('env'))
  if (select.env !== undefined) {
    const block = 'env_' + select.env
    if (app[block] === undefined) {
      const blocks = Object.keys(app).filter((name) => name.startsWith('env_'))
      throw new CliUsageError(`--env ${select.env}: ${field(block)} does not exist` + (blocks.length > 0 ? ` (the app has ${blocks.join(', ')})` : ' (the app has no env_<name> block)'))
    }
    // PM2: the named block over env.
    Object.assign(result.env, environment(app[block], field(block)))
  }
  restartPolicy(app, field, result.options)
  if (app.cron_restart !== undefined) {
    if (typeof app.cron_restart !== 'string') throw new CliUsageError(`${field('cron_restart')} must be a cron expression such as "0 3 * * *"`)
    try {
      parseCron(app.cron_restart)
    } catch (err) {
      throw new CliUsageError(`${field('cron_restart')}: ${err.message}`)
    }
    result.options.reload = Object.assign({}, result.options.reload, { cron: app.cron_restart })
  }
  if (app.watch !== undefined && app.watch !== false) result.options.watch = watchOption(app, base, field)
  else if (app.ignore_watch !== undefined) result.ignored.push('ignore_watch (watch is off)')
  if (app.instance_var !== undefined) {
    if (typeof app.instance_var !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(app.instance_var)) throw new CliUsageError(`${field('instance_var')} must be an environment variable name`)
    result.instanceVar = app.instance_var
  }
  for (const name of Object.keys(app)) {
    if (UNDERSTOOD.includes(name)) continue
    // env_<name> blocks are chosen with --env; only unchosen ones are worth naming, and only without --env.
    if (name.startsWith('env_')) {
      if (select.env === undefined) result.ignored.push(`${name} (select it with --env ${name.slice(4)})`)
      continue
    }
    result.ignored.push(name)
  }
  debug('ecosystem %s: %o', file, result)
  return result
}

/** The index of the app to run: the only one, or the one `only` names. */
function pickApp (file, apps, only) {
  apps.forEach((app, i) => {
    if (!app || typeof app !== 'object') throw new CliUsageError(`${file}: apps[${i}] must be an object`)
  })
  const names = apps.map((app, i) => typeof app.name === 'string' && app.name !== '' ? app.name : `apps[${i}] (no name)`)
  if (only !== undefined) {
    const index = apps.findIndex((app) => app.name === only)
    if (index === -1) throw new CliUsageError(`--only ${only}: ${file} has no app named ${JSON.stringify(only)} (its apps: ${names.join(', ')})`)
    return index
  }
  if (apps.length === 1) return 0
  if (apps.length === 0) throw new CliUsageError(`${file}: "apps" is empty`)
  const named = apps.filter((app) => typeof app.name === 'string' && app.name !== '')
  const example = named.length > 0 ? named[0].name : null
  throw new CliUsageError(`${file}: "apps" has ${apps.length} entries (${names.join(', ')}); clusterize runs one app per primary: ` +
    (example !== null
      ? `start each with --only NAME, e.g. \`clusterize ${file} --only ${example}\` (each app gets its own pid file; give the same --only to reload, stop and status)`
      : 'give each app a "name" and start each with --only NAME, or give each its own file'))
}

function loadApps (file, where) {
  let exported
  try {
    exported = where.endsWith('.json') ? JSON.parse(fs.readFileSync(where, 'utf8')) : require(where)
  } catch (err) {
    throw new CliUsageError(err.code === 'ENOENT' || err.code === 'MODULE_NOT_FOUND' ? `cannot find the ecosystem file ${JSON.stringify(file)}` : `cannot read the ecosystem file ${file}: ${err.message}`)
  }
  const apps = exported && exported.apps
  if (Array.isArray(apps)) return apps
  if (apps && typeof apps === 'object') return [apps]
  throw new CliUsageError(`${file} has no "apps" list (module.exports = { apps: [{ script: 'app.js', instances: 4 }] })`)
}

/** PM2: a count, 0 / 'max' for every CPU, -N for every CPU but N. */
function instances (value, name) {
  if (value === 'max' || value === 0 || value === '0') return 'auto'
  const count = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value
  if (!Number.isInteger(count) || count > 1024 || count < -1024) throw new CliUsageError(`${name} must be a number of workers, 0 or "max" (every CPU), or -N (every CPU but N), got ${JSON.stringify(value)}`)
  return count > 0 ? count : Math.max(1, availableCpus() + count)
}

/** PM2 takes bytes, or a number with K, M or G. */
function memoryMB (value, name) {
  const match = /^(\d+(?:\.\d+)?)\s*([KMG]?)B?$/i.exec(String(value))
  const mb = match ? Number(match[1]) * MEMORY_UNITS[match[2].toUpperCase()] : NaN
  if (!(mb >= 1)) throw new CliUsageError(`${name} must be a size of at least 1M such as "300M" or "1G", got ${JSON.stringify(value)}`)
  return Math.round(mb)
}

function milliseconds (value, name) {
  const ms = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value
  if (!Number.isInteger(ms) || ms < 0 || ms > MAX_TIMER_MS) throw new CliUsageError(`${name} must be milliseconds from 0 to ${MAX_TIMER_MS}, got ${JSON.stringify(value)}`)
  return ms
}

/**
 * PM2 restarts an app that dies within min_uptime of its start at most
 * max_restarts times in a row; a crash after min_uptime does not count.
 * clusterize's breaker likewise ignores a worker that stayed ready
 * restart.stableAfterMs, and counts the others in a sliding window:
 * max_restarts becomes restart.maxCrashes, min_uptime restart.stableAfterMs
 * and the window's length the time one worker needs to crash that many times
 * living min_uptime each, restart delays included.
 */
function restartPolicy (app, field, options) {
  const restart = {}
  if (app.max_restarts !== undefined) restart.maxCrashes = count(app.max_restarts, field('max_restarts'))
  if (app.exp_backoff_restart_delay !== undefined) restart.backoffInitialMs = milliseconds(app.exp_backoff_restart_delay, field('exp_backoff_restart_delay'))
  if (app.min_uptime !== undefined) {
    const minUptime = duration(app.min_uptime, field('min_uptime'))
    const crashes = restart.maxCrashes || PM2_MAX_RESTARTS
    if (restart.maxCrashes === undefined) restart.maxCrashes = crashes
    const initial = restart.backoffInitialMs !== undefined ? restart.backoffInitialMs : DEFAULTS.restart.backoffInitialMs
    const policy = { backoffInitialMs: initial, backoffMaxMs: Math.max(initial, DEFAULTS.restart.backoffMaxMs) }
    let windowMs = 0
    // The largest delay backoffDelay() gives (its jitter at the top) before each of those restarts.
    for (let failures = 1; failures <= crashes; failures++) windowMs += minUptime + backoffDelay(failures, policy, () => 1)
    restart.crashWindowMs = Math.min(MAX_TIMER_MS, Math.max(1, Math.round(windowMs)))
    restart.stableAfterMs = minUptime
  }
  if (Object.keys(restart).length > 0) options.restart = restart
}

function count (value, name) {
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value
  if (!Number.isInteger(n) || n < 1 || n > 1000000) throw new CliUsageError(`${name} must be a whole number of at least 1, got ${JSON.stringify(value)}`)
  return n
}

/** PM2 takes milliseconds, or a string such as "10s", "1m", "1h". */
function duration (value, name) {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(String(value).trim())
  const ms = match ? Number(match[1]) * { ms: 1, s: 1000, m: 60000, h: 3600000 }[match[2] || 'ms'] : NaN
  if (!(ms >= 0) || ms > MAX_TIMER_MS) throw new CliUsageError(`${name} must be milliseconds or a duration such as "10s", got ${JSON.stringify(value)}`)
  return Math.round(ms)
}

/** `watch: true` watches the app's directory; a path or a list of paths (relative to it) watch those. */
function watchOption (app, base, field) {
  let paths
  if (app.watch === true) paths = [base]
  else if (typeof app.watch === 'string' && app.watch !== '') paths = [path.resolve(base, app.watch)]
  else if (Array.isArray(app.watch) && app.watch.length > 0 && app.watch.every((p) => typeof p === 'string' && p !== '')) paths = app.watch.map((p) => path.resolve(base, p))
  else throw new CliUsageError(`${field('watch')} must be true, false, a path or a list of paths, got ${JSON.stringify(app.watch)}`)
  const watch = { paths }
  if (app.ignore_watch !== undefined) {
    const ignore = typeof app.ignore_watch === 'string' ? [app.ignore_watch] : app.ignore_watch
    if (!Array.isArray(ignore) || !ignore.every((p) => typeof p === 'string' && p !== '')) throw new CliUsageError(`${field('ignore_watch')} must be a path or a list of paths`)
    watch.ignore = ignore
  }
  return watch
}

function environment (value, name) {
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new CliUsageError(`${name} must be an object of environment variables`)
  const env = {}
  for (const [key, raw] of Object.entries(value)) {
    if (raw === null || typeof raw === 'object' || typeof raw === 'function') throw new CliUsageError(`${name}.${key} must be a string, number or boolean`)
    env[key] = String(raw)
  }
  return env
}

/**
 * Apply the ecosystem file to a start: the app becomes its script, the
 * file's settings fill in what the command line and environment leave open.
 * In a worker it also sets PM2's instance variable to the worker's slot.
 * @param {{ app: string, flags: object }} parsed from parseArgs
 * @param {NodeJS.ProcessEnv} env modified in place (workers inherit it)
 * @returns {{ file: string, parsed: { app: string, flags: object }, options: object, ignored: string[] }}
 */
function applyEcosystem (parsed, env) {
  const ecosystem = readEcosystem(parsed.app, { only: parsed.flags.only, env: parsed.flags.env })
  for (const [key, value] of Object.entries(ecosystem.env)) {
    if (env[key] === undefined || env[key] === '') env[key] = value
  }
  // The slot id: stable per slot and reused by replacements, as PM2's is per instance.
  if (env.CLUSTERIZE_WORKER_ID !== undefined) env[ecosystem.instanceVar] = env.CLUSTERIZE_WORKER_ID
  // WORKERS in the environment is an explicit choice, as a flag is.
  const fromFile = Object.assign({}, ecosystem.flags)
  if (env.WORKERS) delete fromFile.workers
  return {
    file: parsed.app,
    parsed: Object.assign({}, parsed, { app: ecosystem.script, flags: Object.assign(fromFile, parsed.flags) }),
    options: ecosystem.options,
    ignored: ecosystem.ignored
  }
}

/**
 * Nested options from the file under the ones the command line built.
 * @param {object} options from buildOptions
 * @param {object} fromFile
 */
function mergeOptions (options, fromFile) {
  for (const [key, value] of Object.entries(fromFile)) {
    options[key] = Object.assign({}, value, options[key])
  }
  return options
}

module.exports = { isEcosystemFile, readEcosystem, applyEcosystem, mergeOptions }
