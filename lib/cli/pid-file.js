'use strict'

/**
 * The pid file: JSON `{ pid, controlSocket, reloadSignal, port, host,
 * probesPort, probesHost, app, script, workers, startedAt, startTime, bootId }`
 * (startTime and bootId: the process's own, on Linux, see sameProcess()), written by the
 * primary when it is ready and removed when it exits. `reload`, `stop` and
 * `status` find the primary through it.
 *
 * The CLI often runs as root, and what it reads here decides which process
 * it signals; so a pid file another user could have written or changed is
 * refused, and so is a reload signal clusterize does not use. Writing never
 * follows a symlink planted at the temp path.
 */

const crypto = require('crypto')
const fs = require('fs')
const path = require('path')
const debug = require('debug')('clusterize:cli')
const { isAlive } = require('../process-alive')
const { RELOAD_SIGNALS } = require('../signals')
const { unsafeDirReason, WRITABLE_BY_OTHERS } = require('./runtime-dir')

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL } = fs.constants
// O_NOFOLLOW is absent on Windows, where symlinks need privileges anyway.
const O_NOFOLLOW = fs.constants.O_NOFOLLOW || 0
const MAX_PID_FILE_BYTES = 64 * 1024
const TEMP_ATTEMPTS = 5

/**
 * Read a pid file.
 * @param {string} file
 * @returns {object|null} null when the file does not exist
 * @throws {Error} when it exists but is not a clusterize pid file, or is not
 *   safe to trust (another user's, writable by others, a symlink, a reload
 *   signal clusterize does not use)
 */
function readPidFile (file) {
  let fd
  try {
    fd = fs.openSync(file, O_RDONLY | O_NOFOLLOW)
  } catch (err) {
    if (err.code === 'ENOENT') return null
    if (err.code === 'ELOOP') throw new Error(`refusing pid file ${file}: it is a symlink`)
    throw err
  }
  let text
  try {
    // The checks and the read use one descriptor: the file cannot be swapped in between.
    const stat = fs.fstatSync(fd)
    const unsafe = untrustedReason(stat)
    if (unsafe) throw new Error(`refusing pid file ${file}: ${unsafe}`)
    if (stat.size > MAX_PID_FILE_BYTES) throw new Error(`${file} is not a clusterize pid file (${stat.size} bytes)`)
    text = fs.readFileSync(fd, 'utf8')
  } finally {
    fs.closeSync(fd)
  }
  let info
  try {
    info = JSON.parse(text)
  } catch {
    // Tolerate a bare pid written by hand or by another tool.
    info = /^\s*\d+\s*$/.test(text) ? { pid: Number(text) } : null
  }
  if (!info || typeof info !== 'object' || !Number.isInteger(info.pid) || info.pid <= 0) {
    throw new Error(`${file} is not a clusterize pid file`)
  }
  if (info.reloadSignal != null && !RELOAD_SIGNALS.includes(info.reloadSignal)) {
    throw new Error(`refusing pid file ${file}: reload signal ${JSON.stringify(info.reloadSignal)} is not one clusterize uses (${RELOAD_SIGNALS.join(', ')})`)
  }
  return info
}

/**
 * Why a pid file cannot be trusted, or null. Root's own files and root's
 * primaries are trusted by everyone; nobody trusts a file others may write.
 * @param {fs.Stats} stat
 * @returns {string|null}
 */
function untrustedReason (stat) {
  if (!stat.isFile()) return 'it is not a regular file'
  if (typeof process.getuid !== 'function') return null
  if (stat.uid !== process.getuid() && stat.uid !== 0) {
    return `it belongs to another user (uid ${stat.uid}); only your own or root's pid files are used`
  }
  if ((stat.mode & WRITABLE_BY_OTHERS) !== 0) {
    return `other users may write to it (mode ${(stat.mode & 0o777).toString(8)}); chmod go-w it if it is really yours`
  }
  return null
}

/**
 * Can a pid file be written in this directory without another user being
 * able to replace it? Checked at startup, before anything forks.
 * @param {string} file
 * @throws {Error} saying why not
 */
function checkPidFileDir (file) {
  const dir = path.dirname(file)
  fs.mkdirSync(dir, { recursive: true })
  const reason = unsafeDirReason(dir)
  if (reason) throw new Error(`cannot keep the pid file ${file} safe: ${reason}`)
}

/**
 * Write atomically (temp file + rename) so a reader never sees half a file.
 * The temp file is created with O_EXCL | O_NOFOLLOW: a symlink or file
 * already at its path is never followed or reused; another name is tried.
 * @param {string} file
 * @param {object} info
 */
function writePidFile (file, info) {
  checkPidFileDir(file)
  const body = JSON.stringify(info, null, 2) + '\n'
  let temp = `${file}.${process.pid}.tmp`
  let fd
  for (let attempt = 1; fd === undefined; attempt++) {
    try {
      fd = fs.openSync(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o644)
    } catch (err) {
      if ((err.code !== 'EEXIST' && err.code !== 'ELOOP') || attempt >= TEMP_ATTEMPTS) throw err
      debug('%s exists (%s): trying another temp name', temp, err.code)
      temp = `${file}.${process.pid}.${crypto.randomBytes(6).toString('hex')}.tmp`
    }
  }
  try {
    fs.writeSync(fd, body)
    fs.closeSync(fd)
    fd = undefined
    fs.renameSync(temp, file)
  } catch (err) {
    if (fd !== undefined) fs.closeSync(fd)
    try { fs.unlinkSync(temp) } catch {}
    throw err
  }
  debug('wrote pid file %s', file)
}

/**
 * Remove the pid file if it still names `pid` (a newer primary may own it).
 * Synchronous: called from process.on('exit').
 * @param {string} file
 * @param {number} pid
 */
function removePidFile (file, pid) {
  try {
    const info = readPidFile(file)
    if (info && info.pid === pid) fs.unlinkSync(file)
  } catch (err) {
    debug('could not remove pid file %s: %s', file, err.message)
  }
}

/**
 * Is this pid a live process that is (as far as we can tell) the clusterize
 * primary the pid file describes? On Linux the command line is checked so a
 * recycled pid is reported as stale instead of being signalled.
 * @param {object} info from readPidFile
 * @returns {boolean}
 */
function isPrimaryAlive (info) {
  if (!isAlive(info.pid)) return false
  if (!info.script) return true
  let cmdline
  try {
    cmdline = fs.readFileSync(`/proc/${info.pid}/cmdline`, 'utf8')
  } catch {
    return true // no procfs (macOS) or not allowed: trust the pid
  }
  return cmdline.split('\0').some((arg) => path.basename(arg) === info.script)
}

/**
 * When a process started, on Linux: its start time in clock ticks since boot (/proc/<pid>/stat,
 * field 22) and the boot's id. Together they name one process for good: a process that gets the
 * pid later has another start time. null without procfs.
 * @param {number} pid
 * @returns {{ startTime: string, bootId: string }|null}
 */
function processIdentity (pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    // The command name (field 2) is in parentheses and may itself hold spaces or parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const bootId = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()
    return { startTime: fields[19], bootId }
  } catch {
    return null
  }
}

/**
 * Is the process behind info.pid the one that wrote the pid file (same start time, same boot)?
 * @param {object} info from readPidFile
 * @returns {{ same: boolean, why: string }} why: when not, what is missing or different
 */
function sameProcess (info) {
  if (typeof info.startTime !== 'string' || typeof info.bootId !== 'string') return { same: false, why: 'the pid file records no process start time' }
  const now = processIdentity(info.pid)
  if (!now) return { same: false, why: `the start time of pid ${info.pid} cannot be read (no /proc)` }
  if (now.startTime !== info.startTime || now.bootId !== info.bootId) {
    return { same: false, why: `pid ${info.pid} started at another time than the primary that wrote the pid file (its pid was reused)` }
  }
  return { same: true, why: '' }
}

module.exports = { readPidFile, writePidFile, removePidFile, isPrimaryAlive, checkPidFileDir, processIdentity, sameProcess }
