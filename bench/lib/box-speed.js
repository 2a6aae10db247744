'use strict'

/**
 * How fast one core of this box is right now: the CPU time this process takes
 * for a fixed piece of work (HMACs, which allocate and hash as a server's
 * request does), sampled between measurements while the servers are idle.
 * On shared cloud boxes it swings by up to 2x for seconds at a time with
 * nothing on the box to show for it (no steal, no other process): the
 * neighbours on the host. CPU time, not wall time, so a busy box's queueing
 * is not counted, only the core's speed.
 */

const crypto = require('crypto')

const HMACS_PER_SAMPLE = 2000
const WARM_UP_SAMPLES = 10

/**
 * Microseconds of this process's CPU for the fixed work: higher is slower.
 * @returns {number}
 */
function sampleCpuMicros () {
  const before = process.cpuUsage()
  for (let n = 0; n < HMACS_PER_SAMPLE; n++) crypto.createHmac('sha256', 'box-speed').update('sample-' + n).digest('base64')
  const spent = process.cpuUsage(before)
  return spent.user + spent.system
}

/**
 * Samples taken with sample(); summary() gives the slow ones against the fast
 * ones. The first samples are thrown away (they pay for the JIT).
 */
function createBoxSpeed () {
  const samples = []
  for (let i = 0; i < WARM_UP_SAMPLES; i++) sampleCpuMicros()
  return {
    /** @returns {number} this sample's CPU µs */
    sample () {
      const micros = sampleCpuMicros()
      samples.push(micros)
      return micros
    },
    /**
     * One sample alone moves by about 20% on a steady box, so the spread is of
     * the 90th percentile against the 10th, not of the extremes.
     * @returns {{ samples: number, spread: number }} spread: slow / fast (1 = steady)
     */
    summary () {
      if (samples.length < 2) return { samples: samples.length, spread: NaN }
      const sorted = samples.slice().sort((a, b) => a - b)
      const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
      return { samples: samples.length, spread: at(0.9) / at(0.1) }
    }
  }
}

module.exports = { createBoxSpeed, sampleCpuMicros }
