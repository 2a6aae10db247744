'use strict'

/**
 * Where the pid file and the control socket live by default: a directory
 * only this user can write to, so another local user can neither plant a
 * file there nor swap one. $XDG_RUNTIME_DIR/clusterize when the session has
 * one (systemd: /run/user/<uid>, 0700), otherwise <tmpdir>/clusterize-<uid>
 * created 0700. Any local user can create that name in a shared /tmp first:
 * then ~/.clusterize/run (0700) is used instead, so a squatted directory is no
 * denial of service. The file name is derived from the working directory, so
 * `clusterize reload` finds the primary started from the same directory.
 */

const crypto = require('crypto')
const fs = require('fs')
const os = require('os')
const path = require('path')
const debug = require('debug')('clusterize:cli')

/** `fs.constants.S_IWGRP | S_IWOTH`: anyone but the owner may write. */
const WRITABLE_BY_OTHERS = 0o022
const STICKY = 0o1000

/**
 * The default pid file for a primary started in `cwd`.
 * @param {NodeJS.ProcessEnv} env
 * @param {string} cwd
 * @param {string} [app] the ecosystem app `--only` picked: each app of one file gets its own
 * @returns {string} an absolute path (its directory may not exist yet)
 */
function defaultPidFile (env, cwd, app) {
  const name = path.basename(cwd).replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 32) || 'root'
  const hash = crypto.createHash('sha256').update(cwd).digest('hex').slice(0, 10)
  const suffix = app ? '-' + app.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 64) : ''
  return path.join(runtimeDir(env), `${name}-${hash}${suffix}.pid`)
}

/**
 * @param {NodeJS.ProcessEnv} env
 * @returns {string}
 */
function runtimeDir (env) {
  const xdg = env.XDG_RUNTIME_DIR
  if (xdg && path.isAbsolute(xdg) && isPrivateDir(xdg)) return path.join(xdg, 'clusterize')
  if (xdg) debug('ignoring XDG_RUNTIME_DIR %s: not a directory only this user can write to', xdg)
  const shared = sharedRuntimeDir()
  if (!squatted(shared)) return shared
  const fallback = homeRuntimeDir()
  if (fallback) debug('%s is not ours: using %s', shared, fallback)
  return fallback || shared
}

/** <tmpdir>/clusterize-<uid> */
function sharedRuntimeDir () {
  const uid = typeof process.getuid === 'function' ? process.getuid() : os.userInfo().username
  return path.join(os.tmpdir(), `clusterize-${uid}`)
}

/** Something is at `dir` that is not a private directory of this user (another user made it first). */
function squatted (dir) {
  try {
    fs.lstatSync(dir)
  } catch {
    return false
  }
  return !isPrivateDir(dir)
}

/** ~/.clusterize/run when the home directory is this user's and closed to others, else null. */
function homeRuntimeDir () {
  let home
  try {
    home = os.homedir()
  } catch {
    return null
  }
  if (!home || !path.isAbsolute(home) || !isPrivateDir(home)) return null
  return path.join(home, '.clusterize', 'run')
}

/**
 * When the shared default is squatted and another directory is used instead: a line that says
 * so, for the start to print; null otherwise.
 * @param {NodeJS.ProcessEnv} env
 * @returns {string|null}
 */
function runtimeDirNotice (env) {
  const shared = sharedRuntimeDir()
  const dir = runtimeDir(env)
  // Only when the fallback stands in for the shared default (not when XDG_RUNTIME_DIR is used).
  if (dir !== homeRuntimeDir() || !squatted(shared)) return null
  return `${shared} is not a directory only you can write to (${describeOwner(shared)}): the pid file and control socket are in ${dir} instead; remove ${shared} to go back to the default`
}

/**
 * Where a primary started while <tmpdir>/clusterize-<uid> was squatted keeps its default pid
 * file: `reload`/`stop` look there when the default has none (the squatter may have left since).
 * @returns {string|null} null when that is the default itself, or there is no usable home
 */
function fallbackPidFile (env, cwd) {
  const fallback = homeRuntimeDir()
  const file = defaultPidFile(env, cwd)
  if (!fallback || path.dirname(file) === fallback) return null
  return path.join(fallback, path.basename(file))
}

function describeOwner (dir) {
  try {
    const stat = fs.lstatSync(dir)
    if (stat.isSymbolicLink()) return 'a symlink'
    if (typeof process.getuid === 'function' && stat.uid !== process.getuid()) return `it belongs to uid ${stat.uid}`
    return `mode ${(stat.mode & 0o7777).toString(8)}`
  } catch (err) {
    return err.code
  }
}

/**
 * Create the directory of a default pid file, 0700, and check it is ours:
 * in a shared /tmp another user may have created it first, or a symlink.
 * @param {string} dir
 * @throws {Error} when it exists and is not a private directory of this user
 */
function ensurePrivateDir (dir) {
  fs.mkdirSync(path.dirname(dir), { recursive: true, mode: 0o700 })
  try {
    fs.mkdirSync(dir, { mode: 0o700 })
  } catch (err) {
    if (err.code !== 'EEXIST') throw err
  }
  if (!isPrivateDir(dir)) {
    throw new Error(`${dir} is not a directory that only this user can write to (${describeOwner(dir)}); ` +
      `remove it (rm -r ${dir}), set XDG_RUNTIME_DIR to a directory only you can write to, or pass --pid-file in a directory you own`)
  }
}

/** A real directory (not a symlink), owned by this user, writable by no one else. */
function isPrivateDir (dir) {
  let stat
  try {
    stat = fs.lstatSync(dir)
  } catch {
    return false
  }
  if (!stat.isDirectory()) return false
  if (typeof process.getuid !== 'function') return true
  return stat.uid === process.getuid() && (stat.mode & WRITABLE_BY_OTHERS) === 0
}

/**
 * May a file be created in `dir` without another user replacing it? The
 * directory is this user's or root's, and anyone else who can write to it is
 * held back by the sticky bit (as in /tmp).
 * @param {string} dir
 * @returns {string|null} why not, or null when it is safe
 */
function unsafeDirReason (dir) {
  if (typeof process.getuid !== 'function') return null
  const stat = fs.statSync(dir)
  if (stat.uid !== process.getuid() && stat.uid !== 0) return `${dir} belongs to another user (uid ${stat.uid})`
  if ((stat.mode & WRITABLE_BY_OTHERS) !== 0 && (stat.mode & STICKY) === 0) {
    return `${dir} is writable by other users (mode ${(stat.mode & 0o7777).toString(8)}) without the sticky bit`
  }
  return null
}

module.exports = { defaultPidFile, runtimeDir, runtimeDirNotice, fallbackPidFile, ensurePrivateDir, isPrivateDir, unsafeDirReason, WRITABLE_BY_OTHERS }
