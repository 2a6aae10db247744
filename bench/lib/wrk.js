'use strict'

/**
 * wrk with a new connection per request (`-H 'Connection: close'`): every
 * request pays for a TCP accept, so whatever sits on the accept path shows.
 */

const { execFile, spawnSync } = require('child_process')

let available = null

/** Is wrk installed (Debian package `wrk`)? */
function hasWrk () {
  if (available === null) available = !spawnSync('wrk', ['--version']).error
  return available
}

/**
 * @param {{ port: number, connections: number, seconds: number, path?: string }} options (wrk takes whole seconds)
 * @returns {Promise<{ rps: number, total: number, p99: number, failed: number }>}
 */
function wrkClose (options) {
  const args = ['-t1', `-c${options.connections}`, `-d${Math.max(1, Math.round(options.seconds))}s`, '--latency', '-H', 'Connection: close', `http://127.0.0.1:${options.port}${options.path || '/'}`]
  return new Promise((resolve, reject) => {
    execFile('wrk', args, { timeout: (options.seconds + 30) * 1000 }, (err, stdout) => {
      if (err) return reject(err)
      const rps = Number((/Requests\/sec:\s+([\d.]+)/.exec(stdout) || [])[1])
      const total = Number((/(\d+) requests in/.exec(stdout) || [])[1])
      const p99 = toMs(/99%\s+([\d.]+)(us|ms|s)/.exec(stdout))
      const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout)
      const non2xx = Number((/Non-2xx or 3xx responses: (\d+)/.exec(stdout) || [0, 0])[1])
      resolve({ rps, total, p99, failed: non2xx + (errors ? errors.slice(1).reduce((a, b) => a + Number(b), 0) : 0) })
    })
  })
}

function toMs (match) {
  if (!match) return NaN
  const value = Number(match[1])
  return match[2] === 'us' ? value / 1000 : match[2] === 's' ? value * 1000 : value
}

module.exports = { hasWrk, wrkClose }
