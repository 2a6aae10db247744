'use strict'

/**
 * A busy machine for tail-latency rows: N processes that each spin a CPU,
 * started and stopped by PID through ./proc.js.
 */

const { startProcess, stopProcess } = require('./proc')

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

module.exports = { startCpuBurners }
