'use strict'

/**
 * The pid file: JSON `{ pid, port, host, probesPort, probesHost, app, script,
 * workers, startedAt }`, written by the primary when it is ready and removed
 * when it exits. `reload`, `stop` and `status` find the primary through it.
 */

const fs = require('fs')
const path = require('path')
const debug = require('debug')('clusterize:cli')
const { isAlive } = require('../process-alive')

/**
 * Read a pid file.
 * @param {string} file
 * @returns {object|null} null when the file does not exist
 * @throws {Error} when it exists but is not a clusterize pid file
 */
function readPidFile (file) {
  let text
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (err) {
    if (err.code === 'ENOENT') return null
    throw err
  }
  let info
  try {
    info = JSON.parse(text)
  } catch {
    // Tolerate a bare pid written by hand or by another tool.
    info = /^\s*\d+\s*$/.test(text) ? { pid: Number(text) } : null
  }
  if (!info || !Number.isInteger(info.pid) || info.pid <= 0) {
    throw new Error(`${file} is not a clusterize pid file`)
  }
  return info
}

/**
 * Write atomically (temp file + rename) so a reader never sees half a file.
 * @param {string} file
 * @param {object} info
 */
function writePidFile (file, info) {
  fs.mkdirSync(path.dirname(file), { recursive: true })
  const temp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(temp, JSON.stringify(info, null, 2) + '\n')
  fs.renameSync(temp, file)
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
 * @param {number} pid
 * @returns {boolean}
 */
module.exports = { readPidFile, writePidFile, removePidFile, isPrimaryAlive }
