'use strict'

/**
 * The startup banner and the workers table, as plain text. Colour (bold
 * labels, green/yellow states) only when asked, which the CLI does when
 * stdout is a TTY. Pure functions: no I/O here.
 */

const ANSI = { bold: '\x1b[1m', dim: '\x1b[2m', green: '\x1b[32m', yellow: '\x1b[33m', red: '\x1b[31m', reset: '\x1b[0m' }

/**
 * Format the startup banner: a header line, then one aligned table with the
 * primary, address, scheduling, session store, bus bridge, probes and one row
 * per worker (slot, pid, generation, state).
 *
 * @param {object} stats the primary handle's stats() (or /stats JSON)
 * @param {object} [extras]
 * @param {string} [extras.version] package version for the header
 * @param {string} [extras.app] the app module path
 * @param {string} [extras.host] the listen host (default: all interfaces)
 * @param {number} [extras.probesPort] where /live, /ready, /stats are served
 * @param {string} [extras.probesHost]
 * @param {boolean} [extras.dashboard] whether the probes server serves /dashboard (default true)
 * @param {string|object} [extras.redis] the bus.redis option, when stats has no bus status
 * @param {string} [extras.pidFile]
 * @param {number} [extras.startupMs] time from start to ready
 * @param {boolean} [extras.color] ANSI colours (default false)
 * @returns {string} ends with a newline
 */
function formatBanner (stats, extras) {
  extras = extras || {}
  const paint = painter(extras.color)
  const workers = stats.workers || []
  const title = `clusterize-express${extras.version ? ' ' + extras.version : ''}` +
    (extras.app ? `: ${extras.app}` : '') +
    ` ready with ${workers.length} worker${workers.length === 1 ? '' : 's'}` +
    (typeof extras.startupMs === 'number' ? ` in ${Math.round(extras.startupMs)} ms` : '')
  const rows = [
    ['primary', `pid ${stats.pid}, Node ${process.version}`],
    ['listening', listenUrl(extras.host, stats.port)],
    ['scheduling', String(stats.scheduling)],
    ['sessions', describeSessions(workers)],
    ['bus bridge', describeBridge(stats.bus, extras.redis)]
  ]
  if (extras.probesPort) rows.push(['probes', `http://${hostForUrl(extras.probesHost || '127.0.0.1')}:${extras.probesPort} (/live /ready /stats /metrics${extras.dashboard === false ? '' : ' /dashboard'})`])
  if (extras.pidFile) rows.push(['pid file', extras.pidFile])
  const width = Math.max(...rows.map((row) => row[0].length)) + 2
  const lines = [paint('bold', title)]
  for (const [label, value] of rows) lines.push('  ' + paint('dim', label.padEnd(width)) + value)
  lines.push('')
  lines.push(formatWorkersTable(workers, { color: extras.color, indent: '  ' }))
  return lines.join('\n')
}

/**
 * The workers table: slot, pid, generation, state (plus uptime and restarts
 * when the stats carry them). Used by the banner and `clusterize status`.
 * @param {object[]} workers stats().workers
 * @param {{ color?: boolean, indent?: string }} [options]
 * @returns {string} ends with a newline
 */
function formatWorkersTable (workers, options) {
  options = options || {}
  const paint = painter(options.color)
  const indent = options.indent || ''
  const header = ['slot', 'pid', 'generation', 'state', 'uptime', 'restarts']
  const body = workers.map((w) => [
    w.id < 0 ? '-' : String(w.id),
    String(w.pid),
    String(w.generation),
    String(w.state),
    typeof w.uptimeMs === 'number' ? formatDuration(w.uptimeMs) : '-',
    typeof w.restarts === 'number' ? String(w.restarts) : '-'
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => row[i].length)))
  const format = (cells) => indent + cells.map((cell, i) => i === cells.length - 1 ? cell : cell.padEnd(widths[i])).join('  ')
  const lines = [paint('bold', format(header)), format(widths.map((w) => '-'.repeat(w)))]
  for (const row of body) {
    const line = format(row)
    lines.push(paint(stateColor(row[3]), line))
  }
  if (body.length === 0) lines.push(indent + '(no workers)')
  return lines.join('\n') + '\n'
}

/**
 * The singleton() jobs of stats().singletons: which worker runs each, its
 * token, for how long, and where the lease lives. Used by `clusterize status`.
 * @param {object[]} singletons stats().singletons
 * @returns {string} '' when there are none, else a table ending with a newline
 */
function formatSingletonsTable (singletons) {
  if (!Array.isArray(singletons) || singletons.length === 0) return ''
  const header = ['singleton', 'state', 'slot', 'pid', 'token', 'held for', 'lease', 'waiting']
  const body = singletons.map((s) => [
    String(s.name),
    String(s.state),
    s.worker && s.worker.slot !== null ? String(s.worker.slot) : '-',
    s.worker ? String(s.worker.pid) : '-',
    s.token === null || s.token === undefined ? '-' : String(s.token),
    typeof s.heldMs === 'number' ? formatDuration(s.heldMs) : '-',
    String(s.lease),
    String(s.waiting)
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => row[i].length)))
  const format = (cells) => cells.map((cell, i) => i === cells.length - 1 ? cell : cell.padEnd(widths[i])).join('  ')
  return [format(header), format(widths.map((w) => '-'.repeat(w))), ...body.map(format)].join('\n') + '\n'
}

function describeSessions (workers) {
  // A worker reports its session() status with ready (null: it made none) and with every heartbeat.
  const reported = workers.filter((w) => w.heartbeat || w.session !== undefined)
  if (reported.length === 0) return workers.length ? 'not reported yet' : 'none'
  const stores = new Map()
  for (const w of reported) {
    if (!w.session) continue
    const entry = stores.get(w.session.store) || { available: 0, total: 0, lastError: null }
    entry.total++
    if (w.session.available) entry.available++
    else entry.lastError = w.session.lastError
    stores.set(w.session.store, entry)
  }
  if (stores.size === 0) return 'none (the app uses no session() middleware)'
  return [...stores].map(([store, entry]) => {
    const name = store === 'cluster' ? 'cluster store (held by the primary)' : store === 'redis' ? 'redis' : store
    if (entry.available === entry.total) return name
    return `${name} (UNAVAILABLE in ${entry.total - entry.available} worker(s)${entry.lastError ? ': ' + entry.lastError : ''})`
  }).join(', ')
}

function describeBridge (bus, redisOption) {
  if (bus && typeof bus === 'object' && 'bridge' in bus) {
    const bridge = bus.bridge
    if (!bridge) return 'off (this host only)'
    const where = [bridge.host, bridge.channel && `channel ${bridge.channel}`].filter(Boolean).join(', ')
    return `redis${where ? ' ' + where : ''} (${bridge.connected ? 'connected' : 'connecting' + (bridge.lastError ? ': ' + bridge.lastError : '')})`
  }
  if (!redisOption) return 'off (this host only)'
  return 'redis ' + (typeof redisOption === 'string' ? redactUrl(redisOption) : 'from options')
}

/**
 * Hide the password of a redis:// URL.
 * @param {string} url
 * @returns {string}
 */
function redactUrl (url) {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = '***'
    return parsed.toString()
  } catch {
    return url.replace(/\/\/([^@/]*)@/, '//***@')
  }
}

function listenUrl (host, port) {
  if (!host || host === '0.0.0.0' || host === '::') return `port ${port} on all interfaces (http://localhost:${port})`
  return `http://${hostForUrl(host)}:${port}`
}

function hostForUrl (host) {
  return host.includes(':') ? `[${host}]` : host
}

function formatDuration (ms) {
  const seconds = Math.floor(ms / 1000)
  if (seconds < 60) return `${seconds}s`
  const minutes = Math.floor(seconds / 60)
  if (minutes < 60) return `${minutes}m${String(seconds % 60).padStart(2, '0')}s`
  const hours = Math.floor(minutes / 60)
  if (hours < 48) return `${hours}h${String(minutes % 60).padStart(2, '0')}m`
  return `${Math.floor(hours / 24)}d${hours % 24}h`
}

function stateColor (state) {
  if (state === 'ready') return 'green'
  if (state === 'starting' || state === 'draining' || state === 'stopping') return 'yellow'
  return 'red'
}

function painter (color) {
  return function paint (style, text) {
    return color ? ANSI[style] + text + ANSI.reset : text
  }
}

module.exports = { formatBanner, formatWorkersTable, formatSingletonsTable, redactUrl }
