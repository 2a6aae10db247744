'use strict'

/**
 * How much of the machine each group of processes got while a measurement
 * ran: CPU time of every thread (./proc.js threadsCpuMs) over wall time, in
 * cores. On a busy box (--busy) this tells whether two rows competed with the
 * burners on the same terms: with the kernel's autogroup scheduling, CPU is
 * shared between sessions (setsid) before it is shared between processes, so
 * a row whose work spreads over more sessions (a Redis daemon of its own)
 * takes more of the box from the burners than a row that runs in one.
 */

const fs = require('fs')
const { threadsCpuMs } = require('./proc')

/**
 * Start counting.
 * @param {Object<string, number[]>} groups pids by group name
 * @returns {{ stop: () => Object<string, number> }} cores each group used since start
 *   (NaN for a group with no pid, or whose processes could not be read)
 */
function startCpuShare (groups) {
  const names = Object.keys(groups)
  const before = names.map((name) => groups[name].map(threadsCpuMs))
  const startedAt = process.hrtime.bigint()
  return {
    stop () {
      const wallMs = Number(process.hrtime.bigint() - startedAt) / 1e6
      const cores = {}
      names.forEach((name, i) => {
        const pids = groups[name]
        let spentMs = pids.length === 0 ? NaN : 0
        pids.forEach((pid, j) => { spentMs += threadsCpuMs(pid) - before[i][j] })
        cores[name] = wallMs > 0 ? spentMs / wallMs : NaN
      })
      return cores
    }
  }
}

/**
 * The kernel's autogroup setting: true, false, or null where it cannot be
 * read (not Linux, or a kernel without it).
 * @returns {boolean|null}
 */
function autogroupEnabled () {
  try {
    return fs.readFileSync('/proc/sys/kernel/sched_autogroup_enabled', 'utf8').trim() !== '0'
  } catch {
    return null
  }
}

module.exports = { startCpuShare, autogroupEnabled }
