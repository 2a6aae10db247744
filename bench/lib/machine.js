'use strict'

/** One line describing where the numbers came from. */

const os = require('os')

function machineLine (extra) {
  const cpus = os.cpus()
  const model = cpus.length ? cpus[0].model.trim() : 'unknown CPU'
  const parts = [
    `CPU: ${model}`,
    `${os.availableParallelism()} cores available`,
    `${Math.round(os.totalmem() / 2 ** 30)} GiB RAM`,
    `Node ${process.version}`,
    `${os.platform()} ${os.release()}`,
    `date ${new Date().toISOString()}`
  ]
  if (extra) parts.push(extra)
  return '_Machine: ' + parts.join(', ') + '_'
}

module.exports = { machineLine }
