'use strict'

/**
 * How much CPU the rest of the machine used while a benchmark ran: the
 * machine's busy time (/proc/stat) minus what this process and its reaped
 * children (the benchmark script and everything it started and waited for)
 * used (/proc/self/stat). The load average cannot tell the two apart: it
 * counts the benchmark's own load generator and servers, so every run read
 * as a busy box. Linux only; elsewhere null (callers fall back to the load
 * average). Daemons a script uses but does not reap (the machine's
 * redis-server, one it daemonizes) count as other work, so the figure errs
 * towards "busy", unless the script names their pids to cpuSample().
 */

const fs = require('fs')
const { statFields } = require('./proc')

/** Linux's USER_HZ: /proc reports CPU time in 1/100 s on every architecture Node runs on. */
const TICKS_PER_SECOND = 100

/**
 * @param {number[]} [alsoOwn] pids of processes that are not this script's children but whose CPU
 *   is the benchmark's own (the machine's redis-server the script loads); one that cannot be read counts 0
 * @returns {{ busy: number, own: number, at: bigint }|null} ticks
 */
function cpuSample (alsoOwn) {
  try {
    const total = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/).slice(1).map(Number)
    // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
    const busy = total[0] + total[1] + total[2] + total[5] + total[6] + (total[7] || 0)
    // utime, stime, cutime, cstime: this script and the children it reaped.
    const self = statFields('self')
    let own = self[11] + self[12] + self[13] + self[14]
    for (const pid of alsoOwn || []) {
      try {
        const fields = statFields(pid)
        own += fields[11] + fields[12]
      } catch {} // gone or not readable
    }
    return { busy, own, at: process.hrtime.bigint() }
  } catch {
    return null
  }
}

/**
 * Cores' worth of CPU the rest of the machine used between two samples.
 * @param {ReturnType<typeof cpuSample>} before
 * @param {ReturnType<typeof cpuSample>} after
 * @returns {number|null}
 */
function otherCores (before, after) {
  if (!before || !after) return null
  const seconds = Number(after.at - before.at) / 1e9
  if (seconds <= 0) return null
  const ticks = (after.busy - before.busy) - (after.own - before.own)
  return Math.max(0, ticks / TICKS_PER_SECOND / seconds)
}

/**
 * How a script that runs on its own labels its tables: what other work used
 * between two samples, as a share of the machine, and the verdict.
 * @param {ReturnType<typeof cpuSample>} before
 * @param {ReturnType<typeof cpuSample>} after
 * @param {number} cores
 * @param {(otherCores: number, cores: number) => string} label results.js's otherWorkLabel
 * @returns {string} e.g. 'other work used 0.03 of 2 cores: **quiet box**', or null off Linux
 */
function otherWorkLine (before, after, cores, label) {
  const other = otherCores(before, after)
  if (other === null) return null
  return `other work used ${other.toFixed(2)} of ${cores} cores meanwhile: **${label(other, cores)}**`
}

module.exports = { cpuSample, otherCores, otherWorkLine }
