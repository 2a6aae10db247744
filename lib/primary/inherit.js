'use strict'

/**
 * Listening sockets a primary is given instead of binding them itself:
 * - by the primary it replaces (`clusterize upgrade`): CLUSTERIZE_UPGRADE
 *   names the descriptors it passed in stdio and the pid to report to;
 * - by systemd socket activation: LISTEN_FDS / LISTEN_PID, with
 *   LISTEN_FDNAMES (FileDescriptorName=) telling several sockets apart.
 *
 * The variables are removed from process.env once read, as sd_listen_fds()
 * does: workers inherit the environment and must not take them for theirs.
 */

const debug = require('debug')('clusterize:upgrade')
const { ClusterizeOptionError } = require('../errors')

/** systemd passes its sockets from this descriptor on (SD_LISTEN_FDS_START). */
const SD_LISTEN_FDS_START = 3
/** The names a socket unit may give (FileDescriptorName=) and what each serves. */
const ROLES = ['http', 'probes', 'control']
const UPGRADE_ENV = 'CLUSTERIZE_UPGRADE'

/**
 * @typedef {object} Inherited
 * @property {'upgrade'|'systemd'|null} source
 * @property {number|null} http descriptor of the app's listening socket
 * @property {number|null} probes descriptor of the probes server's socket
 * @property {number|null} control descriptor of the CLI's control socket
 * @property {number|null} from the pid of the primary being replaced (upgrade only)
 * @property {number|null} port the port the replaced primary served (upgrade only)
 * @property {number|null} portOption the replaced primary's port option (upgrade only)
 */

/**
 * Read (once) what this process inherited, and clear the variables.
 * @param {NodeJS.ProcessEnv} [env] process.env by default
 * @returns {Inherited}
 * @throws {ClusterizeOptionError} sockets passed but none can be told to serve HTTP
 */
function readInherited (env) {
  env = env || process.env
  if (cached && env === process.env) return cached
  const result = env[UPGRADE_ENV] ? fromUpgrade(env) : fromSystemd(env)
  if (env === process.env) cached = result
  return result
}
let cached = null

function none () {
  return { source: null, http: null, probes: null, control: null, from: null, port: null, portOption: null }
}

function fromUpgrade (env) {
  let spec
  try {
    spec = JSON.parse(env[UPGRADE_ENV])
  } catch {
    spec = null
  }
  delete env[UPGRADE_ENV]
  if (!spec || typeof spec !== 'object' || !Number.isInteger(spec.from)) {
    debug('ignoring an unreadable %s', UPGRADE_ENV)
    return none()
  }
  const fds = spec.fds || {}
  const result = none()
  result.source = 'upgrade'
  result.from = spec.from
  result.port = Number.isInteger(spec.port) ? spec.port : null
  result.portOption = Number.isInteger(spec.portOption) ? spec.portOption : null
  for (const role of ROLES) result[role] = Number.isInteger(fds[role]) ? fds[role] : null
  debug('upgrade from %d: inherited %o', result.from, fds)
  return result
}

function fromSystemd (env) {
  const result = none()
  if (env.LISTEN_FDS === undefined) return result
  const count = Number(env.LISTEN_FDS)
  const forUs = Number(env.LISTEN_PID) === process.pid
  const names = env.LISTEN_FDNAMES !== undefined ? env.LISTEN_FDNAMES.split(':') : []
  delete env.LISTEN_FDS
  delete env.LISTEN_PID
  delete env.LISTEN_FDNAMES
  // Variables meant for another process (a parent that did not clear them) are not ours.
  if (!forUs || !Number.isInteger(count) || count < 1) {
    debug('LISTEN_FDS not for pid %d (LISTEN_PID %s)', process.pid, env.LISTEN_PID)
    return result
  }
  result.source = 'systemd'
  if (count === 1) {
    result.http = SD_LISTEN_FDS_START
    return result
  }
  for (let i = 0; i < count; i++) {
    const role = names[i]
    if (ROLES.includes(role) && result[role] === null) result[role] = SD_LISTEN_FDS_START + i
  }
  if (result.http === null) {
    throw new ClusterizeOptionError(`clusterize: systemd passed ${count} sockets (LISTEN_FDS) named ${JSON.stringify(names.join(':'))}; ` +
      'name the app\'s one FileDescriptorName=http in the .socket unit (and the probes one FileDescriptorName=probes)', 'LISTEN_FDNAMES')
  }
  return result
}

/**
 * A port option changed for an upgrade cannot take effect: the socket is
 * kept. (With socket activation the option was never used: not a change.)
 * @param {{ port: number }} config
 * @param {Inherited} inherited
 * @throws {ClusterizeOptionError} naming the option
 */
function checkInheritedPort (config, inherited) {
  if (inherited.source !== 'upgrade' || config.port === 0 || inherited.port === null) return
  if (config.port === inherited.port || config.port === inherited.portOption) return
  throw new ClusterizeOptionError(`clusterize: option "port" (${config.port}) differs from the port the upgraded primary serves (${inherited.port}): ` +
    'an upgrade keeps the listening socket; a new port needs a new start', 'port')
}

/**
 * The descriptor behind a listening handle, so it can be passed to a new
 * primary. Node has no public accessor; `fd` is on every libuv stream handle
 * on Unix and is -1 (or absent) where there is none, which the caller reports.
 * @param {object|null} handle a TCP or Pipe handle (net.Server#_handle, or the dispatcher's)
 * @returns {number|null}
 */
function descriptorOf (handle) {
  if (!handle || typeof handle.fd !== 'number' || handle.fd < 0) return null
  return handle.fd
}

module.exports = { readInherited, checkInheritedPort, descriptorOf, ROLES, UPGRADE_ENV, SD_LISTEN_FDS_START }
