'use strict'

/**
 * Running the `clusterize` CLI from a test: to completion (runCli), or as a
 * primary left running until it wrote its pid file and printed its banner
 * (startCli), and a GET to what it serves (httpGet). The environment is cleared of what would change the CLI's
 * defaults (PORT, WORKERS, REDIS_URL) and of colours.
 */

const { after } = require('node:test')
const { spawn, execFile } = require('child_process')
const fs = require('fs')
const http = require('http')
const os = require('os')
const path = require('path')
const { eventually } = require('./wait')
const { isAlive } = require('../../lib/process-alive')

const CLI_BIN = path.join(__dirname, '..', '..', 'bin', 'clusterize.js')
const HELLO_APP = path.join(__dirname, '..', '..', 'examples', 'hello', 'app.js')
const CLI_ENV = { PORT: '', WORKERS: '', REDIS_URL: '', NO_COLOR: '1' }

/**
 * @param {string[]} args
 * @param {{ cwd: string, env?: object, timeoutMs?: number }} options env: over CLI_ENV
 * @returns {Promise<{ code: number, stdout: string, stderr: string }>} code -1: killed at the timeout
 */
function runCli (args, options) {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI_BIN, ...args], {
      cwd: options.cwd,
      env: Object.assign({}, process.env, CLI_ENV, options.env),
      timeout: options.timeoutMs || 90000
    }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr })
    })
  })
}

/**
 * Start the CLI and wait until `pidFile` exists and the banner is out; rejects
 * with what it printed if it exits first.
 * @param {string[]} args
 * @param {{ cwd: string, pidFile: string, env?: object, tracked?: Set<number>, poll?: { timeoutMs: number, intervalMs: number }, detached?: boolean }} options
 *   tracked: the primary's pid is added (the test kills what is left); detached: in a process
 *   group of its own, so that `process.kill(-child.pid, 'SIGINT')` is a Ctrl-C in its terminal
 * @returns {Promise<{ child: import('child_process').ChildProcess, exited: Promise<{ code: number|null, signal: string|null }>, readonly output: string }>}
 */
async function startCli (args, options) {
  const child = spawn(process.execPath, [CLI_BIN, ...args], {
    cwd: options.cwd,
    env: Object.assign({}, process.env, CLI_ENV, options.env),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: Boolean(options.detached)
  })
  if (options.tracked) options.tracked.add(child.pid)
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  let gone = false
  exited.then(() => { gone = true })
  await eventually(() => {
    if (gone) throw new Error('the CLI exited before it was ready:\n' + output)
    return fs.existsSync(options.pidFile) && output.includes('slot')
  }, { ...(options.poll || { timeoutMs: 30000, intervalMs: 50 }), what: 'the pid file and the banner' })
  return { child, exited, get output () { return output } }
}

/**
 * GET `urlPath` on 127.0.0.1:port over a connection of its own (what the CLI started answers).
 * @returns {Promise<{ status: number, body: string, json: *|null }>} json: null when the body is not JSON
 */
function httpGet (port, urlPath) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: urlPath || '/', agent: false, timeout: 5000 }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode, body, json: jsonOrNull(body) }))
    })
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.on('error', reject)
  })
}

function jsonOrNull (text) {
  try { return JSON.parse(text) } catch { return null }
}

/**
 * A scratch directory and a set of pids for one test file, cleaned up after
 * its tests, pass or fail: every tracked pid still alive is SIGKILLed (by
 * PID), and the directory removed. Call it at the top of the file.
 * @param {string} label part of the directory's name
 * @returns {{ tmp: string, tracked: Set<number> }} tracked: add every pid the file starts
 */
function cliScratch (label) {
  const tracked = new Set()
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `clusterize-${label}-`))
  after(function cleanUp () {
    for (const pid of tracked) {
      if (isAlive(pid)) {
        try { process.kill(pid, 'SIGKILL') } catch {}
      }
    }
    fs.rmSync(tmp, { recursive: true, force: true })
  })
  return { tmp, tracked }
}

module.exports = { CLI_BIN, HELLO_APP, CLI_ENV, runCli, startCli, httpGet, cliScratch }
