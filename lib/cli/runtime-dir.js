'use strict'

/**
 * Where the pid file and the control socket live by default: a directory
 * only this user can write to, so another local user can neither plant a
 * file there nor swap one. $XDG_RUNTIME_DIR/clusterize when the session has
 * one (systemd: /run/user/<uid>, 0700), otherwise <tmpdir>/clusterize-<uid>
 * created 0700. The file name is derived from the working directory, so
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
  const uid = typeof process.getuid === 'function' ? process.getuid() : os.userInfo().username
  return path.join(os.tmpdir(), `clusterize-${uid}`)
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
    throw new Error(`${dir} is not a directory that only this user can write to (another user, a symlink or a wide mode); ` +
      'remove it, or pass --pid-file in a directory you own')
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

module.exports = { defaultPidFile, runtimeDir, ensurePrivateDir, isPrivateDir, unsafeDirReason, WRITABLE_BY_OTHERS }
