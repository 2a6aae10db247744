'use strict'

/**
 * A busy machine for tail-latency rows: N processes that each spin a CPU,
 * started and stopped by PID through ./proc.js. And an unsteady one: cores
 * taken away in chunks, as a hypervisor takes an instance's vCPUs (steal).
 */

const { startProcess, stopProcess, sleep } = require('./proc')
const { isAlive } = require('../../lib/process-alive')

/**
 * @param {number} count processes to start (0: none)
 * @returns {{ pids: number[], stop: () => Promise<void> }}
 */
function startCpuBurners (count) {
  const burners = []
  for (let i = 0; i < count; i++) burners.push(startProcess({ args: ['-e', 'for (;;) {}'], name: `cpu burner ${i + 1}` }))
  return {
    pids: burners.map((proc) => proc.pid),
    async stop () {
      await Promise.all(burners.map((proc) => stopProcess(proc)))
    }
  }
}

/** A stealer: spin `on` ms, sleep `off` ms, from a random phase, until it is stopped. */
const STEALER = `const [on, off] = process.argv.slice(1).map(Number)
const cell = new Int32Array(new SharedArrayBuffer(4))
Atomics.wait(cell, 0, 0, Math.random() * (on + off))
for (;;) {
  const stop = performance.now() + on
  while (performance.now() < stop) {}
  Atomics.wait(cell, 0, 0, off)
}`

/**
 * --steal <on>/<off>[@<core>,<core>...]: parsed, or null when the option is absent.
 * Without @, every core of the machine.
 * @param {string[]} argv
 * @param {number} cores the machine's cores
 * @returns {{ onMs: number, offMs: number, cores: number[], label: string }|null} label: the option as given
 */
function stealArg (argv, cores) {
  const i = argv.indexOf('--steal')
  if (i === -1) return null
  const given = argv[i + 1]
  const match = /^(\d+(?:\.\d+)?)\/(\d+(?:\.\d+)?)(?:@(\d+(?:,\d+)*))?$/.exec(given || '')
  const onMs = match ? Number(match[1]) : NaN
  const offMs = match ? Number(match[2]) : NaN
  const list = match && match[3] !== undefined ? match[3].split(',').map(Number) : Array.from({ length: cores }, (_, core) => core)
  if (!(onMs > 0 && offMs > 0) || list.some((core) => core >= cores) || new Set(list).size !== list.length) {
    throw new Error(`--steal takes <on>/<off> in milliseconds, both above 0, and optionally @ and the cores to take from (0 to ${cores - 1}, each once; all without @): e.g. --steal 3/3 takes every core 3 ms in every 6, --steal 3/3@1 only core 1. Got ${given === undefined ? 'nothing' : JSON.stringify(given)}`)
  }
  return { onMs, offMs, cores: list, label: given }
}

/**
 * One process per core given, pinned to it (taskset) at real-time priority (chrt -f 50, so it
 * preempts every other process there, as a hypervisor's steal does), spinning onMs then sleeping offMs.
 * Needs root and util-linux's chrt and taskset; refuses with an error that says so.
 * @param {{ onMs: number, offMs: number, cores: number[] }} options
 * @returns {Promise<{ pids: number[], stop: () => Promise<void> }>}
 */
async function startCoreStealers ({ onMs, offMs, cores }) {
  const stealers = []
  for (const core of cores) {
    stealers.push(startProcess({
      node: 'chrt',
      args: ['-f', '50', 'taskset', '-c', String(core), process.execPath, '-e', STEALER, String(onMs), String(offMs)],
      name: `core stealer ${core}`
    }))
  }
  // Without chrt the spawn fails with 'error' (ENOENT), and there is no pid to stop.
  for (const proc of stealers) proc.child.on('error', (err) => { proc.stderr += err.message })
  const stop = async () => { await Promise.all(stealers.filter((proc) => proc.pid).map((proc) => stopProcess(proc))) }
  await sleep(200)
  const failed = stealers.find((proc) => !proc.pid || !isAlive(proc.pid))
  if (failed) {
    await stop()
    throw new Error(`--steal: could not start ${failed.name} (chrt -f needs root, and util-linux's chrt and taskset): ${failed.stderr.trim() || 'it exited'}`)
  }
  return { pids: stealers.map((proc) => proc.pid), stop }
}

module.exports = { startCpuBurners, startCoreStealers, stealArg }
