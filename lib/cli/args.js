'use strict'

/**
 * Command-line parsing for `clusterize`. Every mistake is a CliUsageError
 * that names the flag; the CLI prints it and exits with code 2 before
 * anything is forked.
 */

const { SCHEDULING, SESSION_STORES } = require('../config')
const { RELOAD_SIGNALS } = require('../signals')
const { MAX_TIMER_MS } = require('../errors')
const { CliUsageError } = require('./errors')

const COMMANDS = ['reload', 'upgrade', 'scale', 'stop', 'status', 'top']
/** 0.1's default, in the working directory; now only pointed at in messages. */
const LEGACY_PID_FILE = 'clusterize.pid'

// flag -> { key, value: kind of value (undefined for booleans), commands it applies to }
const FLAGS = {
  '--workers': { key: 'workers', value: 'workers', for: ['start'] },
  '--port': { key: 'port', value: 'port', for: ['start'] },
  '--host': { key: 'host', value: 'string', for: ['start'] },
  '--scheduling': { key: 'scheduling', value: 'scheduling', for: ['start'] },
  '--probes-port': { key: 'probesPort', value: 'port', for: ['start', 'status', 'top'] },
  '--probes-host': { key: 'probesHost', value: 'string', for: ['start', 'status', 'top'] },
  '--redis': { key: 'redis', value: 'string', for: ['start'] },
  '--reload-signal': { key: 'reloadSignal', value: 'signal', for: ['start'] },
  '--bake-ms': { key: 'bakeMs', value: 'ms', for: ['start'] },
  '--sessions': { key: 'sessions', value: 'sessions', for: ['start'] },
  '--env': { key: 'env', value: 'name', for: ['start'] },
  '--only': { key: 'only', value: 'name', for: ['start', 'reload', 'upgrade', 'stop', 'status', 'top'] },
  '--rate-limit': { key: 'rateLimit', value: 'rateLimit', for: ['start'] },
  '--pid-file': { key: 'pidFile', value: 'string', for: ['start', 'reload', 'upgrade', 'scale', 'stop', 'status', 'top'] },
  '--main-pid-file': { key: 'mainPidFile', value: 'string', for: ['start'] },
  '--node': { key: 'node', value: 'string', for: ['upgrade'] },
  '--timeout': { key: 'timeout', value: 'seconds', for: ['reload', 'upgrade', 'scale', 'stop'] },
  '--watch': { key: 'watch', for: ['start'] },
  '--json': { key: 'json', for: ['start', 'reload', 'upgrade', 'scale', 'stop', 'status'] },
  '--help': { key: 'help', for: ['start', 'reload', 'upgrade', 'scale', 'stop', 'status', 'top'] },
  '--version': { key: 'version', for: ['start', 'reload', 'upgrade', 'scale', 'stop', 'status', 'top'] }
}
const ALIASES = { '-h': '--help', '-v': '--version' }

/**
 * Parse `process.argv.slice(2)`.
 * @param {string[]} argv
 * @returns {{ command: 'start'|'reload'|'upgrade'|'scale'|'stop'|'status'|'top', app: string|null, flags: object }}
 *   for upgrade, what follows `--` is in `flags.args`: start flags the new primary adds to the old ones
 * @throws {CliUsageError}
 */
function parseArgs (argv) {
  const flags = {}
  const positionals = []
  let afterDashes = []
  const seen = new Map()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (arg === '--') {
      afterDashes = argv.slice(i + 1)
      break
    }
    // `clusterize scale -1` retires one worker: a signed number is a value, not a flag.
    if (!arg.startsWith('-') || arg === '-' || /^-\d+$/.test(arg)) {
      positionals.push(arg)
      continue
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1
    const name = ALIASES[eq === -1 ? arg : arg.slice(0, eq)] || (eq === -1 ? arg : arg.slice(0, eq))
    const spec = FLAGS[name]
    if (!spec) throw new CliUsageError(`unknown flag ${arg}${suggest(name)}`)
    if (!spec.value) {
      if (eq !== -1) throw new CliUsageError(`${name} takes no value, got ${JSON.stringify(arg.slice(eq + 1))}`)
      flags[spec.key] = true
      seen.set(spec.key, name)
      continue
    }
    let raw
    if (eq !== -1) {
      raw = arg.slice(eq + 1)
    } else {
      raw = argv[i + 1]
      if (raw === undefined || (raw.startsWith('-') && raw !== '-' && !/^-\d/.test(raw))) {
        throw new CliUsageError(`${name} needs a value (${describeValue(spec.value)})`)
      }
      i++
    }
    flags[spec.key] = convert(name, spec.value, raw)
    seen.set(spec.key, name)
  }

  // `clusterize start app.js`, as pm2 users type it; a lone `start` is still an app file.
  if (positionals[0] === 'start' && positionals.length > 1) positionals.shift()
  let command = 'start'
  if (positionals.length > 0 && COMMANDS.includes(positionals[0])) command = positionals.shift()
  if (command === 'upgrade') {
    if (afterDashes.length > 0) flags.args = afterDashes
  } else {
    positionals.push(...afterDashes)
  }
  const app = command === 'start' && positionals.length > 0 ? positionals.shift() : null
  if (flags.help || flags.version) return { command, app, flags }
  if (command === 'scale') flags.scale = scaleArgument(positionals.shift())
  if (positionals.length > 0) {
    throw new CliUsageError(`unexpected argument ${JSON.stringify(positionals[0])}` +
      (command === 'start' ? ' (one app file only)' : command === 'scale' ? ' (clusterize scale takes one count)' : ` (clusterize ${command} takes no file; use --pid-file)`))
  }
  for (const name of seen.values()) {
    if (!FLAGS[name].for.includes(command)) {
      throw new CliUsageError(`${name} does not apply to ${command === 'start' ? 'starting an app' : 'clusterize ' + command}`)
    }
  }
  if (command === 'start' && !app) {
    throw new CliUsageError('missing the app file: clusterize app.js [flags]')
  }
  return { command, app, flags }
}

/**
 * `clusterize scale N` (that many workers), `+N` (add N) or `-N` (retire N), as `pm2 scale` takes them.
 * @returns {{ count: number }|{ delta: number }}
 */
function scaleArgument (raw) {
  if (raw === undefined) throw new CliUsageError('missing the worker count: clusterize scale N (or +N to add, -N to retire)')
  if (!/^[+-]?\d+$/.test(raw)) throw new CliUsageError(`clusterize scale takes a worker count (N, +N or -N), got ${JSON.stringify(raw)}`)
  if (/^[+-]/.test(raw)) return { delta: Number(raw) }
  const count = Number(raw)
  if (count < 1 || count > 1024) throw new CliUsageError(`clusterize scale takes a count from 1 to 1024, got ${raw}; to stop every worker use clusterize stop`)
  return { count }
}

function convert (name, kind, raw) {
  switch (kind) {
    case 'port':
      if (!/^\d+$/.test(raw) || Number(raw) > 65535) throw new CliUsageError(`${name} must be a port number from 0 to 65535, got ${JSON.stringify(raw)}`)
      return Number(raw)
    case 'workers':
      if (raw === 'auto') return raw
      if (!/^\d+$/.test(raw) || Number(raw) > 1024) throw new CliUsageError(`${name} must be a number from 0 to 1024 or "auto", got ${JSON.stringify(raw)}`)
      return Number(raw)
    case 'scheduling':
      if (!SCHEDULING.includes(raw)) throw new CliUsageError(`${name} must be one of ${SCHEDULING.join(', ')}, got ${JSON.stringify(raw)}`)
      return raw
    case 'sessions':
      if (!SESSION_STORES.includes(raw)) throw new CliUsageError(`${name} must be "cluster" (express-session's default store becomes the cluster store), "redis" (it becomes the Redis store: needs --redis or REDIS_URL) or "memory", got ${JSON.stringify(raw)}`)
      return raw
    case 'name':
      // An ecosystem file's app name or env block: PM2 names, no path or shell characters.
      if (!/^[A-Za-z0-9][\w.-]{0,63}$/.test(raw)) throw new CliUsageError(`${name} must be a name of letters, digits, '.', '_' or '-' (up to 64), got ${JSON.stringify(raw)}`)
      return raw
    case 'rateLimit':
      if (raw !== 'cluster' && raw !== 'memory') throw new CliUsageError(`${name} must be "cluster" (express-rate-limit's default store becomes the cluster store) or "memory", got ${JSON.stringify(raw)}`)
      return raw
    case 'signal':
      if (!RELOAD_SIGNALS.includes(raw)) throw new CliUsageError(`${name} must be one of ${RELOAD_SIGNALS.join(', ')}, got ${JSON.stringify(raw)}`)
      return raw
    case 'ms':
      if (!/^\d+$/.test(raw) || Number(raw) > MAX_TIMER_MS) throw new CliUsageError(`${name} must be a whole number of milliseconds from 0 to ${MAX_TIMER_MS}, got ${JSON.stringify(raw)}`)
      return Number(raw)
    case 'seconds':
      if (!/^\d+(\.\d+)?$/.test(raw) || Number(raw) <= 0 || Number(raw) * 1000 > MAX_TIMER_MS) throw new CliUsageError(`${name} must be a number of seconds from 0 to ${Math.floor(MAX_TIMER_MS / 1000)}, got ${JSON.stringify(raw)}`)
      return Number(raw)
    default:
      if (raw === '') throw new CliUsageError(`${name} needs a non-empty value`)
      return raw
  }
}

function describeValue (kind) {
  return {
    port: 'a port number',
    workers: 'a number or "auto"',
    scheduling: SCHEDULING.join('|'),
    seconds: 'seconds',
    ms: 'milliseconds',
    signal: RELOAD_SIGNALS.join('|'),
    sessions: SESSION_STORES.join('|'),
    name: 'a name',
    rateLimit: 'cluster|memory',
    string: 'a value'
  }[kind]
}

function suggest (name) {
  const bare = name.replace(/^-+/, '')
  let best = null
  let bestDistance = 3
  for (const flag of Object.keys(FLAGS)) {
    const distance = editDistance(bare, flag.slice(2))
    if (distance < bestDistance) {
      best = flag
      bestDistance = distance
    }
  }
  return best ? ` (did you mean ${best}?)` : ''
}

function editDistance (a, b) {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    previous = row
  }
  return previous[b.length]
}

/**
 * The clusterize() options for a start, identical in the primary and in
 * every worker (workers re-run this script with the same argv).
 * @param {object} flags from parseArgs
 * @param {NodeJS.ProcessEnv} env
 * @returns {object}
 */
function buildOptions (flags, env) {
  const options = {}
  if (flags.workers !== undefined) options.workers = flags.workers
  if (flags.port !== undefined) options.port = flags.port
  if (flags.host !== undefined) options.host = flags.host
  if (flags.scheduling !== undefined) options.scheduling = flags.scheduling
  if (flags.sessions !== undefined) options.defaultSessionStore = flags.sessions
  if (flags.rateLimit !== undefined) options.defaultRateLimitStore = flags.rateLimit
  if (flags.watch) options.watch = true
  const redis = flags.redis !== undefined ? flags.redis : (env.REDIS_URL || undefined)
  if (redis) options.bus = { redis }
  if (flags.reloadSignal !== undefined || flags.bakeMs !== undefined) {
    options.reload = {}
    if (flags.reloadSignal !== undefined) options.reload.signal = flags.reloadSignal
    if (flags.bakeMs !== undefined) options.reload.bakeMs = flags.bakeMs
  }
  // The CLI always serves probes (loopback, any free port unless given) so
  // that `clusterize status` works from the pid file alone.
  options.probes = { port: flags.probesPort !== undefined ? flags.probesPort : 0 }
  if (flags.probesHost !== undefined) options.probes.host = flags.probesHost
  return options
}

module.exports = { parseArgs, buildOptions, CliUsageError, FLAGS, COMMANDS, LEGACY_PID_FILE }
