'use strict'

/**
 * Decide how connections reach workers, and fall back (with a warning, never
 * a crash) when the platform cannot do what was asked.
 */

const cluster = require('cluster')
const net = require('net')
const { canBalance } = require('./balancer')

/**
 * Does this Node and platform support `reusePort` on TCP listen?
 * Node >= 22.12 (22.x) or >= 23.1, on Linux, FreeBSD or DragonFly.
 * @returns {{ supported: boolean, reason?: string }}
 */
function reusePortSupport (version, platform) {
  version = version || process.versions.node
  platform = platform || process.platform
  const [major, minor] = version.split('.').map(Number)
  const nodeOk = major > 23 || (major === 23 && minor >= 1) || (major === 22 && minor >= 12)
  if (!nodeOk) return { supported: false, reason: `Node ${version} has no reusePort (needs >= 22.12 or >= 23.1)` }
  if (!['linux', 'freebsd'].includes(platform)) return { supported: false, reason: `SO_REUSEPORT load balancing is not available on ${platform}` }
  return { supported: true }
}

/**
 * The mode used when no `scheduling` option is given: 'balanced' (workers
 * accept at the kernel's speed from a socket the primary holds, spread by
 * open connections; bench/side-by-side.js) on Linux with Node >= 22.12,
 * else 'rr', with the reason.
 * @param {{ version?: string, platform?: string, canBalance?: boolean }} [where] this process's by default
 * @returns {{ mode: 'balanced'|'rr', reason?: string }}
 */
function defaultScheduling (where) {
  where = where || {}
  const version = where.version || process.versions.node
  const platform = where.platform || process.platform
  const balances = where.canBalance === undefined ? canBalance() : where.canBalance
  const [major, minor] = version.split('.').map(Number)
  if (platform !== 'linux') {
    return { mode: 'rr', reason: platform === 'win32'
      ? 'on Windows workers sharing one listening socket are not spread well (node:cluster itself round-robins there)'
      : `'balanced' relies on how Linux queues a shared listening socket, and ${platform} is not Linux` }
  }
  if (major < 22 || (major === 22 && minor < 12)) return { mode: 'rr', reason: `Node ${version} is older than 22.12, the oldest Node the default 'balanced' is run on` }
  if (!balances) return { mode: 'rr', reason: `Node ${version} cannot bind a socket without listening on it` }
  return { mode: 'balanced' }
}

/**
 * @param {object} config resolved configuration (`scheduling` undefined: not given, the default applies)
 * @param {object} log
 * @returns {{ mode: string, listenMode: 'handoff'|'cluster'|'reuseport'|'balanced' }}
 */
function resolveScheduling (config, log) {
  let mode = config.scheduling
  if (mode === undefined) {
    const chosen = defaultScheduling()
    if (chosen.reason) log.info(`scheduling: 'rr' (the default is 'balanced' on Linux with Node >= 22.12; here ${chosen.reason})`)
    mode = chosen.mode
  }
  if (mode === 'reuseport') {
    const support = reusePortSupport()
    if (!support.supported) {
      log.warn(`scheduling 'reuseport' is not available: ${support.reason}; falling back to 'rr'`)
      mode = 'rr'
    }
  }
  if (mode === 'balanced' && !canBalance()) {
    log.warn(`scheduling 'balanced' is not available: Node ${process.versions.node} cannot bind a socket without listening on it; falling back to 'none'`)
    mode = 'none'
  }
  if (mode === 'balanced') return { mode, listenMode: 'balanced' }
  if (mode === 'none') {
    // Must be set before the first fork; cluster freezes it then.
    cluster.schedulingPolicy = cluster.SCHED_NONE
    return { mode, listenMode: 'cluster' }
  }
  if (mode === 'reuseport') return { mode, listenMode: 'reuseport' }
  return { mode, listenMode: 'handoff' }
}

/**
 * Pick a free port on the host (for port 0 with reuseport, where every worker
 * must bind the same port).
 */
function findFreePort (host) {
  return new Promise((resolve, reject) => {
    const probe = net.createServer()
    probe.once('error', reject)
    probe.listen({ port: 0, host }, () => {
      const { port } = probe.address()
      probe.close(() => resolve(port))
    })
  })
}

module.exports = { resolveScheduling, defaultScheduling, reusePortSupport, findFreePort }
