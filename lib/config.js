'use strict'

/**
 * Every clusterize option: defaults, environment fallbacks and validation.
 * Validation runs before anything is forked, and every error names the option
 * and the values it accepts.
 */

const net = require('net')
const os = require('os')
const { ClusterizeOptionError, MAX_TIMER_MS } = require('./errors')
const { createChecks } = require('./check-options')
const { availableCpus } = require('./cpus')
const { RELOAD_SIGNALS, UPGRADE_SIGNALS } = require('./signals')
const { defaultMaxIdleConnections } = require('./fd-limit')
const { defaultProbeConnections } = require('./primary/probe-connections')

const SCHEDULING = ['rr', 'none', 'reuseport', 'sticky', 'balanced']
const SERIALIZATION = ['json', 'advanced']
/** What express-session's default store (no store given) becomes: see lib/worker/pitfalls.js. */
const SESSION_STORES = ['memory', 'cluster', 'redis']
/** Never watched for `watch` (besides what the option adds): dependencies and the repository. */
const WATCH_ALWAYS_IGNORED = ['node_modules', '.git']

const DEFAULTS = {
  port: 3000,
  host: undefined,
  workers: 'auto',
  spare: 0,
  defaultSessionStore: 'memory',
  defaultRateLimitStore: 'memory',
  /** Not given: the primary picks ('balanced' on Linux with Node >= 22.12, else 'rr'; lib/primary/scheduling.js). */
  scheduling: undefined,
  sticky: {
    sid: false
  },
  health: {
    heartbeatMs: 1000,
    heartbeatTimeoutMs: 10000,
    maxMemoryMB: 0,
    maxHeapRatio: 0.9,
    maxEventLoopDelayMs: 500
  },
  restart: {
    backoffInitialMs: 100,
    backoffMaxMs: 10000,
    maxCrashes: 5,
    crashWindowMs: 60000,
    stableAfterMs: 5000
  },
  reload: {
    signal: 'SIGUSR2',
    readyTimeoutMs: 30000,
    drainTimeoutMs: 30000,
    bakeMs: 5000,
    /** Derived from health when not given: see resolveReloadHeartbeatTimeout(). */
    heartbeatTimeoutMs: undefined,
    batch: 1,
    /** A cron expression: a rolling reload on that schedule (PM2's cron_restart); null: none. */
    cron: null
  },
  /** Reload when files change (development): true (the app's directory), paths, or { paths, ignore, debounceMs }. */
  watch: null,
  upgrade: {
    signal: 'SIGURG',
    timeoutMs: 60000
  },
  shutdown: {
    timeoutMs: 25000,
    signals: ['SIGTERM', 'SIGINT']
  },
  probes: null,
  bus: {
    redis: null,
    channel: 'clusterize:bus',
    shardedPubSub: 'auto',
    serialization: 'json',
    maxMessageBytes: 1024 * 1024,
    /** What one process may hold queued towards one peer. */
    maxQueuedBytes: 16 * 1024 * 1024,
    stallTimeoutMs: 5000,
    outageBufferBytes: 8 * 1024 * 1024
  },
  metrics: {
    registries: undefined,
    timeoutMs: 1000,
    pushIntervalMs: 1000
  },
  /** The bounds the primary enforces on the cluster session store (lib/session/cluster-backend.js). */
  clusterStore: {
    maxSessions: 100000,
    maxTotalBytes: 128 * 1024 * 1024,
    /** How long a worker may answer reads of a session from its own copy (lib/session/leases.js); 0: never. */
    leaseMs: 1000
  },
  /** The bounds of socket.io connection-state recovery's state in the primary, per namespace (lib/realtime). */
  recovery: {
    maxPackets: 10000,
    maxSessions: 100000,
    liveWaitMs: 5000
  },
  logger: undefined,
  banner: true,
  keepAliveTimeout: 65000,
  headersTimeout: 66000,
  maxIdleConnections: 'auto',
  /**
   * A request whose body averages less than minBytesPerSecond since its head arrived, once
   * graceMs has passed, gets 408 and is closed (lib/worker/slow-bodies.js); 0 turns it off.
   */
  slowBody: {
    minBytesPerSecond: 240,
    graceMs: 5000
  },
  /** V8's largest semi-space for workers, in MB (lib/primary/worker-flags.js); 0: V8's default. */
  maxSemiSpaceMB: 16
}

const TOP_LEVEL = Object.keys(DEFAULTS)

const checks = createChecks('clusterize')
const { fail, group } = checks
const { parseRedisTarget } = require('./redis/target')
const checkInteger = checks.integer
const checkNumber = checks.number
const checkOneOf = checks.oneOf

/** 127.0.0.0/8 and ::1; BlockList also matches their IPv4-mapped IPv6 forms. */
const LOOPBACK = new net.BlockList()
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4')
LOOPBACK.addAddress('::1', 'ipv6')

/**
 * Addresses only this machine can reach: the literal 'localhost' or an IP
 * address in 127.0.0.0/8 or ::1 (brackets allowed). Parsed, not prefix-matched:
 * '127.attacker.example' is a DNS name that may resolve anywhere.
 * @param {string} host
 * @returns {boolean}
 */
function isLoopback (host) {
  if (typeof host !== 'string') return false
  if (host.toLowerCase() === 'localhost') return true
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host
  const family = net.isIP(bare)
  if (family === 0) return false
  return LOOPBACK.check(bare, family === 4 ? 'ipv4' : 'ipv6')
}

function parsePort (option, value) {
  const port = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value
  return checkInteger(option, port, 0, 65535)
}

function resolveWorkers (value) {
  if (value === 'auto') return availableCpus()
  const count = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value
  if (!Number.isInteger(count) || count < 0 || count > 1024) throw fail('workers', "an integer from 0 to 1024, 'auto', or { min, max } (dynamic workers)", value)
  return count
}

/** Dynamic workers' defaults (lib/primary/scale-policy.js): see docs/operations.md. */
const DYNAMIC_WORKERS = {
  min: 1,
  max: 'auto',
  upElu: 0.75,
  downElu: 0.25,
  upAfterMs: 10000,
  downAfterMs: 60000
}

/**
 * `workers: { min, max }`: the count follows the workers' event-loop
 * utilization between min and max ('auto': the CPUs this process may use).
 */
function resolveDynamicWorkers (value) {
  const dynamic = group('workers', value, DYNAMIC_WORKERS)
  checkInteger('workers.min', dynamic.min, 1, 1024)
  if (dynamic.max !== 'auto') checkInteger('workers.max', dynamic.max, dynamic.min, 1024)
  checkNumber('workers.upElu', dynamic.upElu, 0.01, 1)
  checkNumber('workers.downElu', dynamic.downElu, 0, 1)
  if (dynamic.downElu >= dynamic.upElu) throw fail('workers.downElu', `below workers.upElu (${dynamic.upElu})`, dynamic.downElu)
  checkInteger('workers.upAfterMs', dynamic.upAfterMs, 0, MAX_TIMER_MS)
  checkInteger('workers.downAfterMs', dynamic.downAfterMs, 0, MAX_TIMER_MS)
  return dynamic
}

function checkLogger (value) {
  if (value === undefined || value === false || value === null) return value
  if (typeof value !== 'object' && typeof value !== 'function') {
    throw fail('logger', "an object with info/warn/error methods, or false", value)
  }
  for (const level of ['info', 'warn', 'error']) {
    if (typeof value[level] !== 'function') {
      throw new ClusterizeOptionError(`clusterize: option "logger" must have an ${level}() method (pino, console and winston do)`, 'logger')
    }
  }
  return value
}

/**
 * How long a worker of a generation being rolled out may go without a
 * heartbeat before the reload fails. Shorter than the hang timeout so that a
 * canary that hangs is caught inside its bake window (5 s by default), not
 * after every slot was replaced: three heartbeats, at least 3 s (a loaded
 * machine delays healthy beats too), at most health.heartbeatTimeoutMs.
 */
function resolveReloadHeartbeatTimeout (value, health) {
  if (value === undefined) {
    return Math.min(health.heartbeatTimeoutMs, Math.max(3000, 3 * health.heartbeatMs))
  }
  checkInteger('reload.heartbeatTimeoutMs', value, 1, MAX_TIMER_MS)
  if (value <= health.heartbeatMs) {
    throw fail('reload.heartbeatTimeoutMs', `greater than health.heartbeatMs (${health.heartbeatMs})`, value)
  }
  return value
}

/**
 * The app's prom-client metrics aggregated on the probes server's /metrics
 * (lib/state/metrics). `false` turns the aggregation off: /metrics then
 * shows clusterize's own metrics only.
 */
function resolveMetrics (value) {
  if (value === false) return false
  const metrics = group('metrics', value, DEFAULTS.metrics)
  const registries = metrics.registries
  if (registries !== undefined && typeof registries !== 'function' &&
      !(Array.isArray(registries) && registries.every((r) => r && typeof r.getMetricsAsJSON === 'function'))) {
    throw fail('metrics.registries', 'an array of prom-client registries, or a function returning one', registries)
  }
  checkInteger('metrics.timeoutMs', metrics.timeoutMs, 1, MAX_TIMER_MS)
  checkInteger('metrics.pushIntervalMs', metrics.pushIntervalMs, 50, MAX_TIMER_MS)
  return metrics
}

/**
 * `watch`: null (off), or { paths (null: the app's directory), ignore, debounceMs }.
 * node_modules and .git are never watched.
 */
function resolveWatch (value) {
  if (value === undefined || value === null || value === false) return null
  const accepted = 'true, a list of paths, or { paths, ignore, debounceMs }'
  let watch
  if (value === true) watch = {}
  else if (Array.isArray(value)) watch = { paths: value }
  else if (typeof value === 'object') watch = value
  else throw fail('watch', accepted, value)
  for (const key of Object.keys(watch)) {
    if (!['paths', 'ignore', 'debounceMs'].includes(key)) throw new ClusterizeOptionError(`clusterize: unknown option "watch.${key}" (accepted: paths, ignore, debounceMs)`, 'watch.' + key)
  }
  const paths = watch.paths === undefined ? null : watch.paths
  const isPathList = (list) => Array.isArray(list) && list.every((p) => typeof p === 'string' && p !== '')
  if (paths !== null && !(isPathList(paths) && paths.length > 0)) throw fail('watch.paths', 'a non-empty list of paths', paths)
  const ignore = watch.ignore === undefined ? [] : watch.ignore
  if (!isPathList(ignore)) throw fail('watch.ignore', 'a list of names, paths or globs such as "*.log"', ignore)
  const debounceMs = watch.debounceMs === undefined ? 500 : checkInteger('watch.debounceMs', watch.debounceMs, 0, 60000)
  return { paths, ignore: WATCH_ALWAYS_IGNORED.concat(ignore), debounceMs }
}

/**
 * The Redis a `defaultSessionStore: 'redis'` store uses: bus.redis, else REDIS_URL; one must be set.
 * @returns {*} the target, or null when the default store is not Redis
 */
function resolveSessionRedis (store, bus, env) {
  if (store !== 'redis') return null
  if (bus.redis !== null) return bus.redis
  if (env.REDIS_URL) {
    parseRedisTarget(env.REDIS_URL, 'REDIS_URL')
    return env.REDIS_URL
  }
  throw new ClusterizeOptionError("clusterize: option \"defaultSessionStore\" 'redis' needs a Redis: set bus.redis (CLI: --redis URL) or REDIS_URL", 'defaultSessionStore')
}

/**
 * Validate options and fill in defaults and environment fallbacks
 * (PORT, HOST, WORKERS); an option always wins over the environment.
 *
 * @param {object} [options]
 * @param {NodeJS.ProcessEnv} [env]
 * @returns {object} the resolved configuration
 */
function resolveConfig (options, env) {
  env = env || process.env
  if (options === undefined || options === null) options = {}
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new ClusterizeOptionError('clusterize: options must be an object', 'options')
  }
  for (const key of Object.keys(options)) {
    if (!TOP_LEVEL.includes(key)) {
      throw new ClusterizeOptionError(
        `clusterize: unknown option "${key}" (accepted: ${TOP_LEVEL.join(', ')})`, key)
    }
  }
  const pick = (key, envName) => {
    if (options[key] !== undefined) return options[key]
    if (envName && env[envName] !== undefined && env[envName] !== '') return env[envName]
    return DEFAULTS[key]
  }

  const config = {}
  config.port = parsePort('port', pick('port', 'PORT'))
  const host = pick('host', 'HOST')
  if (host !== undefined && (typeof host !== 'string' || host === '')) {
    throw fail('host', 'a non-empty string such as "127.0.0.1" or "::"', host)
  }
  config.host = host
  const workers = pick('workers', 'WORKERS')
  const isDynamic = workers !== null && typeof workers === 'object' && !Array.isArray(workers)
  config.dynamicWorkers = isDynamic ? resolveDynamicWorkers(workers) : null
  // A dynamic cluster starts at its minimum; 'auto' follows the CPU quota while it runs.
  config.workers = isDynamic ? config.dynamicWorkers.min : resolveWorkers(workers)
  config.workersAuto = workers === 'auto'
  config.spare = checkInteger('spare', pick('spare'), 0, 64)
  config.defaultSessionStore = checkOneOf('defaultSessionStore', pick('defaultSessionStore'), SESSION_STORES)
  config.defaultRateLimitStore = checkOneOf('defaultRateLimitStore', pick('defaultRateLimitStore'), ['memory', 'cluster'])
  const scheduling = pick('scheduling')
  config.scheduling = scheduling === undefined ? undefined : checkOneOf('scheduling', scheduling, SCHEDULING)
  const sticky = group('sticky', options.sticky, DEFAULTS.sticky)
  checks.boolean('sticky.sid', sticky.sid)
  config.sticky = sticky

  const health = group('health', options.health, DEFAULTS.health)
  checkInteger('health.heartbeatMs', health.heartbeatMs, 50, MAX_TIMER_MS)
  checkInteger('health.heartbeatTimeoutMs', health.heartbeatTimeoutMs, 100, MAX_TIMER_MS)
  if (health.heartbeatTimeoutMs <= health.heartbeatMs) {
    throw fail('health.heartbeatTimeoutMs', `greater than health.heartbeatMs (${health.heartbeatMs})`, health.heartbeatTimeoutMs)
  }
  checkNumber('health.maxMemoryMB', health.maxMemoryMB, 0, 1024 * 1024)
  checkNumber('health.maxHeapRatio', health.maxHeapRatio, 0, 1)
  checkNumber('health.maxEventLoopDelayMs', health.maxEventLoopDelayMs, 0, 3600000)
  config.health = health

  const restart = group('restart', options.restart, DEFAULTS.restart)
  checkInteger('restart.backoffInitialMs', restart.backoffInitialMs, 0, MAX_TIMER_MS)
  checkInteger('restart.backoffMaxMs', restart.backoffMaxMs, restart.backoffInitialMs, MAX_TIMER_MS)
  checkInteger('restart.maxCrashes', restart.maxCrashes, 1)
  checkInteger('restart.crashWindowMs', restart.crashWindowMs, 1, MAX_TIMER_MS)
  checkInteger('restart.stableAfterMs', restart.stableAfterMs, 0, MAX_TIMER_MS)
  config.restart = restart

  const reload = group('reload', options.reload, DEFAULTS.reload)
  // Others either cannot be caught or end the process when nobody handles them.
  if (reload.signal !== null && reload.signal !== false && !RELOAD_SIGNALS.includes(reload.signal)) {
    throw fail('reload.signal', `one of ${RELOAD_SIGNALS.map((name) => `'${name}'`).join(', ')}, or false`, reload.signal)
  }
  checkInteger('reload.readyTimeoutMs', reload.readyTimeoutMs, 1, MAX_TIMER_MS)
  // The primary's kill backstop fires 2 s after the drain deadline.
  checkInteger('reload.drainTimeoutMs', reload.drainTimeoutMs, 0, MAX_TIMER_MS - 2000)
  checkInteger('reload.bakeMs', reload.bakeMs, 0, MAX_TIMER_MS)
  reload.heartbeatTimeoutMs = resolveReloadHeartbeatTimeout(reload.heartbeatTimeoutMs, health)
  checkInteger('reload.batch', reload.batch, 1)
  if (reload.cron === undefined || reload.cron === false) reload.cron = null
  if (reload.cron !== null) {
    try {
      require('./primary/cron-schedule').parseCron(reload.cron)
    } catch (err) {
      throw new ClusterizeOptionError(`clusterize: option "reload.cron" must be a cron expression such as "0 3 * * *": ${err.message}`, 'reload.cron')
    }
  }
  config.reload = reload
  config.watch = resolveWatch(options.watch)

  const upgrade = group('upgrade', options.upgrade, DEFAULTS.upgrade)
  if (upgrade.signal !== null && upgrade.signal !== false && !UPGRADE_SIGNALS.includes(upgrade.signal)) {
    throw fail('upgrade.signal', `${UPGRADE_SIGNALS.map((name) => `'${name}'`).join(', ')} or false`, upgrade.signal)
  }
  checkInteger('upgrade.timeoutMs', upgrade.timeoutMs, 1, MAX_TIMER_MS)
  config.upgrade = upgrade

  const shutdown = group('shutdown', options.shutdown, DEFAULTS.shutdown)
  checkInteger('shutdown.timeoutMs', shutdown.timeoutMs, 0, MAX_TIMER_MS - 2000)
  if (!Array.isArray(shutdown.signals) || shutdown.signals.some((s) => typeof s !== 'string' || !(s in os.constants.signals))) {
    throw fail('shutdown.signals', "an array of signal names such as ['SIGTERM', 'SIGINT']", shutdown.signals)
  }
  config.shutdown = shutdown

  if (options.probes === undefined || options.probes === null || options.probes === false) {
    config.probes = null
  } else {
    const probes = group('probes', options.probes, { port: undefined, host: '127.0.0.1', dashboard: undefined, token: undefined, controlToken: undefined, guardStats: undefined, maxStreams: 64, maxStreamsPerPeer: 8, maxConnections: 'auto', streamBufferBytes: 1024 * 1024, streamsPerMinute: 60 })
    probes.port = parsePort('probes.port', probes.port)
    if (typeof probes.host !== 'string' || probes.host === '') throw fail('probes.host', 'a non-empty string', probes.host)
    for (const key of ['token', 'controlToken']) {
      if (probes[key] !== undefined && (typeof probes[key] !== 'string' || probes[key].length < 16)) {
        throw fail(`probes.${key}`, 'a string of at least 16 characters (e.g. from `openssl rand -hex 16`)', probes[key] === undefined ? probes[key] : '<hidden>')
      }
    }
    if (probes.dashboard !== undefined && typeof probes.dashboard !== 'boolean') throw fail('probes.dashboard', 'true or false', probes.dashboard)
    const loopback = isLoopback(probes.host)
    if (probes.dashboard === true && !loopback && !probes.token) {
      throw new ClusterizeOptionError(`clusterize: option "probes.dashboard" on a non-loopback host (${probes.host}) needs "probes.token": ` +
        'anyone who can reach the port would see the cluster. Set probes.token, or bind probes.host to 127.0.0.1', 'probes.token')
    }
    // On by default where only this machine can reach it, or behind a token.
    if (probes.dashboard === undefined) probes.dashboard = loopback || Boolean(probes.token)
    if (probes.guardStats !== undefined && typeof probes.guardStats !== 'boolean') throw fail('probes.guardStats', 'true or false', probes.guardStats)
    if (probes.guardStats === true && !probes.token) {
      throw new ClusterizeOptionError('clusterize: option "probes.guardStats" needs "probes.token": it makes /stats and /metrics ask for that token', 'probes.guardStats')
    }
    // A token protects everything the dashboard shows unless the user opens /stats and /metrics again.
    if (probes.guardStats === undefined) probes.guardStats = Boolean(probes.token)
    checkInteger('probes.maxStreams', probes.maxStreams, 1, 100000)
    checkInteger('probes.maxStreamsPerPeer', probes.maxStreamsPerPeer, 1, 100000)
    // 'auto': room for every stream plus 64, at most an eighth of the primary's open-file limit.
    if (probes.maxConnections === 'auto') probes.maxConnections = defaultProbeConnections(probes.maxStreams)
    else if (!Number.isInteger(probes.maxConnections) || probes.maxConnections < 1 || probes.maxConnections > 100000) throw fail('probes.maxConnections', "'auto' or an integer from 1 to 100000", probes.maxConnections)
    checkInteger('probes.streamBufferBytes', probes.streamBufferBytes, 1024, 1024 * 1024 * 1024)
    checkInteger('probes.streamsPerMinute', probes.streamsPerMinute, 1, 1000000)
    config.probes = probes
  }

  const bus = group('bus', options.bus, DEFAULTS.bus)
  if (bus.redis === null || bus.redis === undefined) {
    bus.redis = null
  } else {
    // A URL, Sentinel or Cluster configuration fails here at startup, naming bus.redis.
    parseRedisTarget(bus.redis, 'bus.redis')
  }
  if (bus.shardedPubSub !== 'auto' && bus.shardedPubSub !== false) throw fail('bus.shardedPubSub', "'auto' or false", bus.shardedPubSub)
  checkOneOf('bus.serialization', bus.serialization, SERIALIZATION)
  checkInteger('bus.maxMessageBytes', bus.maxMessageBytes, 1)
  checkInteger('bus.maxQueuedBytes', bus.maxQueuedBytes, bus.maxMessageBytes)
  checkInteger('bus.stallTimeoutMs', bus.stallTimeoutMs, 1, MAX_TIMER_MS)
  checkInteger('bus.outageBufferBytes', bus.outageBufferBytes, 0)
  if (typeof bus.channel !== 'string' || bus.channel === '') throw fail('bus.channel', 'a non-empty string', bus.channel)
  config.bus = bus
  config.sessionRedis = resolveSessionRedis(config.defaultSessionStore, bus, env)

  config.metrics = resolveMetrics(options.metrics)
  const clusterStore = group('clusterStore', options.clusterStore, DEFAULTS.clusterStore)
  checkInteger('clusterStore.maxSessions', clusterStore.maxSessions, 1)
  checkInteger('clusterStore.maxTotalBytes', clusterStore.maxTotalBytes, 1)
  checkInteger('clusterStore.leaseMs', clusterStore.leaseMs, 0, 60000)
  config.clusterStore = clusterStore
  const recovery = group('recovery', options.recovery, DEFAULTS.recovery)
  checkInteger('recovery.maxPackets', recovery.maxPackets, 1)
  checkInteger('recovery.maxSessions', recovery.maxSessions, 1)
  checkInteger('recovery.liveWaitMs', recovery.liveWaitMs, 0, MAX_TIMER_MS)
  config.recovery = recovery

  config.logger = checkLogger(options.logger)
  config.banner = pick('banner')
  if (typeof config.banner !== 'boolean') throw fail('banner', 'true or false', config.banner)
  config.keepAliveTimeout = checkInteger('keepAliveTimeout', pick('keepAliveTimeout'), 0, MAX_TIMER_MS)
  config.headersTimeout = checkInteger('headersTimeout', pick('headersTimeout'), 0, MAX_TIMER_MS)
  // A timeout the app set on its own server stays unless these options were given (lib/worker/serve.js).
  config.explicitServerTimeouts = ['keepAliveTimeout', 'headersTimeout'].filter((key) => options[key] !== undefined)
  const maxIdle = pick('maxIdleConnections')
  // 'auto' is read here, once per process: each worker's own descriptor limit.
  if (maxIdle !== 'auto' && (!Number.isInteger(maxIdle) || maxIdle < 1)) throw fail('maxIdleConnections', "'auto' or an integer >= 1", maxIdle)
  config.maxIdleConnections = maxIdle === 'auto' ? defaultMaxIdleConnections() : maxIdle
  const slowBody = group('slowBody', options.slowBody, DEFAULTS.slowBody)
  checkInteger('slowBody.minBytesPerSecond', slowBody.minBytesPerSecond, 0, 1024 * 1024 * 1024)
  checkInteger('slowBody.graceMs', slowBody.graceMs, 0, MAX_TIMER_MS)
  config.slowBody = slowBody
  config.maxSemiSpaceMB = checkInteger('maxSemiSpaceMB', pick('maxSemiSpaceMB'), 0, 1024)
  return config
}

module.exports = { resolveConfig, availableCpus, isLoopback, DEFAULTS, SCHEDULING, SESSION_STORES, WATCH_ALWAYS_IGNORED, DYNAMIC_WORKERS }
