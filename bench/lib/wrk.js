'use strict'

/**
 * wrk, the C load generator the issues' outside measurements use: far less
 * CPU per request than autocannon, so on a 2-core box the servers, not the
 * load generator, take most of the cores.
 *   wrkClose: a new connection per request (`-H 'Connection: close'`): every
 *     request pays for a TCP accept, so whatever sits on the accept path shows;
 *   wrkRun: keep-alive, optionally with a Lua script (wrkCookieScript: each
 *     connection carries its own session cookie, or each request the next one).
 */

const fs = require('fs')
const os = require('os')
const path = require('path')
const { execFile, spawnSync } = require('child_process')

let available = null

/** Is wrk installed (Debian package `wrk`)? */
function hasWrk () {
  if (available === null) available = !spawnSync('wrk', ['--version']).error
  return available
}

/** The duration wrk runs for `seconds`: it takes whole seconds, at least 1. */
function wrkSeconds (seconds) {
  return Math.max(1, Math.round(seconds))
}

/**
 * @param {{ port: number, connections: number, seconds: number, path?: string, headers?: string[], script?: string, threads?: number }} options
 *   (wrk takes whole seconds; `script`: a Lua file; `threads`: wrk's, 1 by default)
 * @returns {Promise<{ rps: number, total: number, p50: number, p99: number, failed: number, non2xx: number, errors: number }>}
 */
function wrkRun (options) {
  const args = [`-t${options.threads || 1}`, `-c${options.connections}`, `-d${wrkSeconds(options.seconds)}s`, '--latency']
  for (const header of options.headers || []) args.push('-H', header)
  if (options.script) args.push('-s', options.script)
  args.push(`http://127.0.0.1:${options.port}${options.path || '/'}`)
  return new Promise((resolve, reject) => {
    execFile('wrk', args, { timeout: (options.seconds + 30) * 1000 }, (err, stdout) => {
      if (err) return reject(err)
      resolve(parseWrk(stdout))
    })
  })
}

/**
 * @param {{ port: number, connections: number, seconds: number, path?: string }} options
 */
function wrkClose (options) {
  return wrkRun(Object.assign({}, options, { headers: ['Connection: close'] }))
}

function parseWrk (stdout) {
  const rps = Number((/Requests\/sec:\s+([\d.]+)/.exec(stdout) || [])[1])
  const total = Number((/(\d+) requests in/.exec(stdout) || [])[1])
  const p50 = toMs(/50%\s+([\d.]+)(us|ms|s)/.exec(stdout))
  const p99 = toMs(/99%\s+([\d.]+)(us|ms|s)/.exec(stdout))
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout)
  const errors = socketErrors ? socketErrors.slice(1).reduce((a, b) => a + Number(b), 0) : 0
  const non2xx = Number((/Non-2xx or 3xx responses: (\d+)/.exec(stdout) || [0, 0])[1])
  return { rps, total, p50, p99, failed: non2xx + errors, non2xx, errors }
}

function toMs (match) {
  if (!match) return NaN
  const value = Number(match[1])
  return match[2] === 'us' ? value / 1000 : match[2] === 's' ? value * 1000 : value
}

/**
 * A wrk Lua script (written to a temp file) whose requests carry `cookies`.
 * `perConnection` (run wrk with as many threads as connections, `threads` of
 * wrkRun): each connection, alone in its wrk thread, carries one session
 * throughout, as a browser or an API client would. Otherwise each request
 * carries the next cookie in turn: with as many cookies as connections, the
 * requests in flight carry different sessions, and a session's requests
 * spread over every connection (and so every worker). The caller removes the
 * file (`remove()`).
 * @param {string[]} cookies `name=value` pairs
 * @param {{ perConnection?: boolean }} [options]
 * @returns {{ file: string, remove: () => void }}
 */
function wrkCookieScript (cookies, options) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-wrk-'))
  const file = path.join(dir, 'cookies.lua')
  const list = cookies.map((cookie) => JSON.stringify(cookie)).join(',\n  ')
  const body = options && options.perConnection
    // setup() runs in wrk's main state, once per thread; thread:set() gives that thread a global.
    ? 'local threads = 0\nsetup = function(thread)\n  threads = threads + 1\n  thread:set("session", threads)\nend\n' +
      'request = function()\n  return wrk.format(nil, nil, { ["Cookie"] = cookies[((session - 1) % #cookies) + 1] })\nend\n'
    : 'local n = 0\nrequest = function()\n  n = n + 1\n  return wrk.format(nil, nil, { ["Cookie"] = cookies[(n % #cookies) + 1] })\nend\n'
  fs.writeFileSync(file, `local cookies = {\n  ${list}\n}\n` + body)
  return { file, remove () { fs.rmSync(dir, { recursive: true, force: true }) } }
}

module.exports = { hasWrk, wrkRun, wrkClose, wrkCookieScript, parseWrk, wrkSeconds }
