'use strict'

const path = require('node:path')
const { OffloadOptionError } = require('./errors')
const { createChecks, describe } = require('../check-options')
const cpus = require('../cpus')
const { resolveTask } = require('./task')
const { MAX_TIMER_MS } = require('../errors')

const RESOURCE_LIMIT_KEYS = ['maxOldGenerationSizeMb', 'maxYoungGenerationSizeMb', 'codeRangeSizeMb', 'stackSizeMb']
const POOL_KEYS = ['threads', 'maxQueue', 'taskTimeoutMs', 'resourceLimits', 'setup', 'maxStartupFailures', 'niceness']
const MIDDLEWARE_KEYS = POOL_KEYS.concat(['cancelOnDisconnect', 'terminateOnDisconnect'])

/**
 * Default nice increment for pool threads: when CPU is scarce the kernel
 * runs the event loop (health checks, light requests) before offloaded work.
 */
const DEFAULT_NICENESS = 10

/** Queue slots per thread when `maxQueue` is not given. */
const QUEUE_PER_THREAD = 64

/**
 * Default thread count: the cores this process may use (cgroup CPU quota
 * included, see ../cpus.js) divided by the number of cluster workers on the
 * host (CLUSTERIZE_WORKERS, set by the primary), at least 1, so N workers do
 * not start N x cores threads and a container limited to 2 CPUs on a large
 * host does not start one thread per host core.
 * @returns {number}
 */
function defaultThreads () {
  const cores = cpus.availableCpus()
  const env = Number(process.env.CLUSTERIZE_WORKERS)
  const workers = Number.isInteger(env) && env > 0 ? env : 1
  return Math.max(1, Math.floor(cores / workers))
}

function fail (prefix, name, accepted, value) {
  throw createChecks(prefix, OffloadOptionError).fail(name, accepted, value)
}

function positiveInt (prefix, name, value, fallback) {
  if (value === undefined) return fallback
  if (!Number.isInteger(value) || value < 1) fail(prefix, name, 'a positive integer', value)
  return value
}

function nonNegativeInt (prefix, name, value, fallback, allowInfinity) {
  if (value === undefined) return fallback
  if (allowInfinity && value === Infinity) return value
  if (!Number.isInteger(value) || value < 0) fail(prefix, name, allowInfinity ? 'an integer >= 0 or Infinity' : 'an integer >= 0', value)
  return value
}

/** A delay in ms a timer can hold (0 = none). */
function timerMs (prefix, name, value, fallback) {
  if (value === undefined) return fallback
  return createChecks(prefix, OffloadOptionError).timerMs(name, value, 0)
}

function bool (prefix, name, value, fallback) {
  if (value === undefined) return fallback
  if (typeof value !== 'boolean') fail(prefix, name, 'true or false', value)
  return value
}

function resourceLimits (prefix, value) {
  if (value === undefined) return undefined
  if (value === null || typeof value !== 'object' || Array.isArray(value)) fail(prefix, 'resourceLimits', `an object with any of ${RESOURCE_LIMIT_KEYS.join(', ')}`, value)
  const out = {}
  for (const key of Object.keys(value)) {
    if (!RESOURCE_LIMIT_KEYS.includes(key)) fail(prefix, 'resourceLimits', `an object with any of ${RESOURCE_LIMIT_KEYS.join(', ')}`, `an object with "${key}"`)
    const v = value[key]
    if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) fail(prefix, `resourceLimits.${key}`, 'a positive number (MB)', v)
    out[key] = v
  }
  return out
}

function niceness (prefix, value) {
  if (value === undefined) return DEFAULT_NICENESS
  if (!Number.isInteger(value) || value < 0 || value > 19) fail(prefix, 'niceness', 'an integer from 0 (off) to 19', value)
  return value
}

function setupPath (prefix, value) {
  if (value === undefined) return undefined
  if (typeof value !== 'string' || !path.isAbsolute(value)) fail(prefix, 'setup', 'an absolute module path (use require.resolve)', value)
  return value
}

/**
 * Validate and normalise pool options; throws OffloadOptionError naming the
 * bad option and the accepted values.
 * @param {object} [options]
 * @param {{ prefix?: string, middleware?: boolean }} [ctx]
 */
function normalizeOptions (options, ctx = {}) {
  const prefix = ctx.prefix || 'offload'
  if (options === undefined || options === null) options = {}
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new OffloadOptionError(`${prefix}: options must be an object, got ${describe(options)}`)
  }
  const keys = ctx.middleware ? MIDDLEWARE_KEYS : POOL_KEYS
  for (const key of Object.keys(options)) {
    if (!keys.includes(key) && options[key] !== undefined) {
      throw new OffloadOptionError(`${prefix}: unknown option "${key}"; accepted options are ${keys.join(', ')}`)
    }
  }
  const threads = positiveInt(prefix, 'threads', options.threads, defaultThreads())
  const out = {
    threads,
    maxQueue: nonNegativeInt(prefix, 'maxQueue', options.maxQueue, threads * QUEUE_PER_THREAD, true),
    taskTimeoutMs: timerMs(prefix, 'taskTimeoutMs', options.taskTimeoutMs, ctx.middleware ? 30000 : 0),
    resourceLimits: resourceLimits(prefix, options.resourceLimits),
    setup: setupPath(prefix, options.setup),
    maxStartupFailures: positiveInt(prefix, 'maxStartupFailures', options.maxStartupFailures, 3),
    niceness: niceness(prefix, options.niceness)
  }
  if (ctx.middleware) {
    out.cancelOnDisconnect = bool(prefix, 'cancelOnDisconnect', options.cancelOnDisconnect, true)
    out.terminateOnDisconnect = bool(prefix, 'terminateOnDisconnect', options.terminateOnDisconnect, false)
  }
  return out
}

/**
 * Validate the per-call options of `pool.exec()`; throws OffloadOptionError
 * naming the bad one.
 * @param {{ signal?: AbortSignal|null, timeoutMs?: number, terminateOnAbort?: boolean }} options
 * @param {number} defaultTimeoutMs the pool's taskTimeoutMs
 * @returns {{ timeoutMs: number, signal: AbortSignal|null, terminateOnAbort: boolean }}
 */
function callOptions (options, defaultTimeoutMs) {
  const timeoutMs = options.timeoutMs
  if (timeoutMs !== undefined && (!Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_TIMER_MS)) {
    throw new OffloadOptionError(`offload: option "timeoutMs" must be an integer from 0 to ${MAX_TIMER_MS} (ms), got ${timeoutMs}`, 'timeoutMs')
  }
  return {
    timeoutMs: timeoutMs === undefined ? defaultTimeoutMs : timeoutMs,
    signal: options.signal == null ? null : options.signal,
    terminateOnAbort: options.terminateOnAbort !== false
  }
}

/**
 * Check one `pool.exec(task, args, options)` call before it is admitted;
 * throws InvalidTaskError or OffloadOptionError.
 * @param {Function|object} task
 * @param {unknown[]} args
 * @param {object} [options] see callOptions()
 * @param {number} defaultTimeoutMs the pool's taskTimeoutMs
 * @returns {{ entry: object, timeoutMs: number, signal: AbortSignal|null, terminateOnAbort: boolean }}
 */
function readCall (task, args, options, defaultTimeoutMs) {
  const entry = resolveTask(task)
  if (!Array.isArray(args)) throw new OffloadOptionError('offload: args must be an array', 'args')
  const call = options === undefined || options === null
    ? { timeoutMs: defaultTimeoutMs, signal: null, terminateOnAbort: true }
    : callOptions(options, defaultTimeoutMs)
  call.entry = entry
  return call
}

module.exports = { normalizeOptions, callOptions, readCall, defaultThreads, QUEUE_PER_THREAD, DEFAULT_NICENESS, POOL_KEYS, MIDDLEWARE_KEYS }
