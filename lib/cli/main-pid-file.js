'use strict'

/**
 * `--main-pid-file F`: the bare pid of the primary, for systemd's PIDFile=.
 * A new primary (`clusterize upgrade`) rewrites it before the old one exits,
 * and systemd, which reads the file again when its main process exits, then
 * follows the service to the new pid. The JSON --pid-file is for the CLI.
 */

const crypto = require('crypto')
const fs = require('fs')
const debug = require('debug')('clusterize:cli')
const { checkPidFileDir } = require('./pid-file')

const { O_WRONLY, O_CREAT, O_EXCL } = fs.constants
const O_NOFOLLOW = fs.constants.O_NOFOLLOW || 0

/**
 * Write `pid\n` atomically (a temp file never follows a planted symlink, then rename).
 * @param {string} file
 * @param {number} pid
 */
function writeMainPid (file, pid) {
  checkPidFileDir(file)
  const temp = `${file}.${process.pid}.${crypto.randomBytes(6).toString('hex')}.tmp`
  const fd = fs.openSync(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o644)
  try {
    fs.writeSync(fd, `${pid}\n`)
  } finally {
    fs.closeSync(fd)
  }
  try {
    fs.renameSync(temp, file)
  } catch (err) {
    try { fs.unlinkSync(temp) } catch {}
    throw err
  }
  debug('wrote main pid file %s', file)
}

/**
 * Remove it if it still names `pid` (after an upgrade it names the new primary).
 * Synchronous: called from process.on('exit').
 * @param {string} file
 * @param {number} pid
 */
function removeMainPid (file, pid) {
  try {
    if (Number(fs.readFileSync(file, 'utf8').trim()) === pid) fs.unlinkSync(file)
  } catch (err) {
    debug('could not remove main pid file %s: %s', file, err.message)
  }
}

module.exports = { writeMainPid, removeMainPid }
