'use strict'

/**
 * A bench script's server side, forked from the script itself with
 * `--serve ...`: it answers `{ port, pids }` (the primary first) over IPC
 * once it serves, or `{ error }`. Stopped with SIGTERM, then SIGKILL, and
 * any worker still alive is killed by its pid.
 */

const { fork } = require('child_process')

/**
 * @param {string} script the bench script (its `--serve` mode runs the server)
 * @param {string[]} args after the script
 * @param {string} name for errors
 * @param {object} [env] added to process.env
 * @param {{ execPath?: string, execArgv?: string[], readyMs?: number }} [options] run the
 *   script under another program (bench/instructions.js: valgrind), and how long it may take to serve
 * @returns {Promise<{ child: import('child_process').ChildProcess, port: number, pids: number[] }>}
 */
function startServed (script, args, name, env, options = {}) {
  const readyMs = options.readyMs || 20000
  const child = fork(script, args, {
    execPath: options.execPath,
    execArgv: options.execArgv,
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    env: Object.assign({}, process.env, { DEBUG: '' }, env)
  })
  let stderr = ''
  child.stderr.on('data', (chunk) => { stderr += chunk })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { kill([child.pid]); reject(new Error(`${name}: not ready in ${readyMs / 1000} s\n${stderr}`)) }, readyMs)
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${name}: server exited (${code})\n${stderr}`)) })
    child.once('message', (msg) => {
      clearTimeout(timer)
      if (msg.error) { kill([child.pid]); return reject(new Error(`${name}: ${msg.error}`)) }
      resolve({ child, port: msg.port, pids: msg.pids })
    })
  })
}

function kill (pids) {
  for (const pid of pids) {
    try { process.kill(pid, 'SIGKILL') } catch {}
  }
}

/** SIGTERM, SIGKILL after 5 s, then any worker still alive. */
async function stopServed (server) {
  server.child.removeAllListeners('exit') // the "exited before ready" rejection
  const exited = new Promise((resolve) => {
    if (server.child.exitCode !== null || server.child.signalCode !== null) return resolve()
    server.child.once('exit', resolve)
  })
  try { process.kill(server.child.pid, 'SIGTERM') } catch {}
  const timer = setTimeout(() => kill([server.child.pid]), 5000)
  await exited
  clearTimeout(timer)
  kill(server.pids.slice(1))
}

module.exports = { startServed, stopServed, kill }
