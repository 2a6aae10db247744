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

/** PM2's own names; `ecosystem.config.js`, `ecosystem.json`, `prod.ecosystem.config.cjs`, `pm2.config.js`. */
const ECOSYSTEM_FILE = /(^|[.-])(ecosystem|pm2)([.-][\w.-]*)?\.(c?js|json)$/i

/** Fields read here; everything else is reported as ignored. */
const UNDERSTOOD = ['script', 'cwd', 'instances', 'exec_mode', 'max_memory_restart', 'kill_timeout', 'listen_timeout', 'wait_ready', 'env', 'instance_var']

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
 * Read an ecosystem file's one app.
 * @param {string} file as given on the command line
 * @returns {{ script: string, flags: object, options: object, env: object, instanceVar: string, ignored: string[] }}
 * @throws {CliUsageError} naming the file and the field
 */
function readEcosystem (file) {
  const where = path.resolve(file)
  const apps = loadApps(file, where)
  if (apps.length !== 1) {
    throw new CliUsageError(`${file}: "apps" has ${apps.length} entries; clusterize runs one app per primary (give each its own file, or its own clusterize with --pid-file)`)
  }
  const app = apps[0]
  if (!app || typeof app !== 'object') throw new CliUsageError(`${file}: apps[0] must be an object`)
  const field = (name) => `${file}: apps[0].${name}`
  if (typeof app.script !== 'string' || app.script === '') throw new CliUsageError(`${field('script')} must name the app file`)
  if (app.cwd !== undefined && typeof app.cwd !== 'string') throw new CliUsageError(`${field('cwd')} must be a directory path`)

  const base = path.resolve(path.dirname(where), app.cwd || '.')
  const result = { script: path.resolve(base, app.script), flags: {}, options: {}, env: {}, instanceVar: 'NODE_APP_INSTANCE', ignored: [] }
  if (app.instances !== undefined) result.flags.workers = instances(app.instances, field('instances'))
  if (app.exec_mode !== undefined && !/^cluster(_mode)?$/.test(app.exec_mode)) {
    // 'fork' runs separate processes; clusterize is always one primary with workers.
    result.ignored.push(`exec_mode (${JSON.stringify(app.exec_mode)}: clusterize always runs cluster mode)`)
  }
  if (app.max_memory_restart !== undefined) result.options.health = { maxMemoryMB: memoryMB(app.max_memory_restart, field('max_memory_restart')) }
  if (app.kill_timeout !== undefined) result.options.shutdown = { timeoutMs: milliseconds(app.kill_timeout, field('kill_timeout')) }
  if (app.listen_timeout !== undefined) result.options.reload = { readyTimeoutMs: milliseconds(app.listen_timeout, field('listen_timeout')) }
  if (app.env !== undefined) result.env = environment(app.env, field('env'))
  if (app.instance_var !== undefined) {
    if (typeof app.instance_var !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(app.instance_var)) throw new CliUsageError(`${field('instance_var')} must be an environment variable name`)
    result.instanceVar = app.instance_var
  }
  for (const name of Object.keys(app)) {
    if (!UNDERSTOOD.includes(name)) result.ignored.push(name)
  }
  debug('ecosystem %s: %o', file, result)
  return result
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
  const ecosystem = readEcosystem(parsed.app)
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
