'use strict'

/**
 * PM2 as a baseline, with a private PM2_HOME in a temp dir so it never
 * touches a user's own PM2. `kill()` runs `pm2 kill`, then SIGKILLs by PID
 * anything of ours still alive.
 */

const { execFile } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { rssMiB, isAlive, sleep } = require('./proc')

const PM2_BIN = path.join(__dirname, '..', '..', 'node_modules', 'pm2', 'bin', 'pm2')

/** PM2 homes not killed yet: their daemons are killed at exit (run-all's time limit, Ctrl-C). */
const unkilled = new Set()
let exitHookInstalled = false

/**
 * The daemon leads its own process group (its apps are in it), outside the
 * bench's group, so killing the bench's group does not reach it.
 */
function killDaemonsSync () {
  for (const home of unkilled) {
    try {
      const pid = Number(fs.readFileSync(path.join(home, 'pm2.pid'), 'utf8'))
      if (pid > 0) process.kill(-pid, 'SIGKILL')
    } catch {}
    try { fs.rmSync(home, { recursive: true, force: true }) } catch {}
  }
  unkilled.clear()
}

/** A signal ends the bench without 'exit' unless someone exits: exit here if no other handler will. */
function onSignal (signal) {
  killDaemonsSync()
  if (process.listenerCount(signal) === 0) process.exit(128 + os.constants.signals[signal])
}

function createPm2 () {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-bench-pm2-'))
  const seenPids = new Set()
  unkilled.add(home)
  if (!exitHookInstalled) {
    exitHookInstalled = true
    process.once('exit', killDaemonsSync)
    for (const signal of ['SIGTERM', 'SIGINT']) process.once(signal, onSignal)
  }

  let killed = false

  function run (args, extraEnv) {
    // The CLI starts a new daemon when none runs: after kill() that one would be left behind.
    if (killed && args[0] !== 'kill') return Promise.reject(new Error(`pm2 ${args.join(' ')}: this PM2 was killed`))
    return new Promise((resolve, reject) => {
      const env = Object.assign({}, process.env, { PM2_HOME: home, PM2_DISCRETE_MODE: 'true' }, extraEnv)
      execFile(process.execPath, [PM2_BIN].concat(args), { env, timeout: 60000 }, (err, stdout, stderr) => {
        if (err) return reject(new Error(`pm2 ${args.join(' ')} failed: ${err.message}\n${stderr}`))
        resolve(stdout)
      })
    })
  }

  async function list () {
    const out = await run(['jlist'])
    const start = out.indexOf('[')
    const apps = JSON.parse(out.slice(start))
    for (const app of apps) if (app.pid) seenPids.add(app.pid)
    return apps
  }

  function daemonPid () {
    try {
      return Number(fs.readFileSync(path.join(home, 'pm2.pid'), 'utf8'))
    } catch {
      return null
    }
  }

  return {
    home,
    run,
    list,
    daemonPid,
    /** Start `script` in cluster mode with `instances` workers. */
    async start (script, options) {
      await run(['start', script, '--name', options.name, '-i', String(options.instances)]
        .concat(options.nodeArgs && options.nodeArgs.length ? ['--node-args', options.nodeArgs.join(' ')] : [])
        .concat(options.args ? ['--'].concat(options.args) : []), options.env)
      const pd = daemonPid()
      if (pd) seenPids.add(pd)
    },
    reload (name) {
      return run(['reload', name])
    },
    /** { daemon: MiB, instances: [MiB] } */
    async memory (name) {
      const apps = (await list()).filter((app) => app.name === name)
      return { daemon: rssMiB(daemonPid()), instances: apps.map((app) => rssMiB(app.pid)) }
    },
    async kill () {
      const pd = daemonPid()
      if (pd) seenPids.add(pd)
      try { await list() } catch {}
      killed = true
      try { await run(['kill']) } catch (err) { process.stderr.write(err.message + '\n') }
      await sleep(300)
      for (const pid of seenPids) {
        if (isAlive(pid)) {
          try { process.kill(pid, 'SIGKILL') } catch {}
        }
      }
      fs.rmSync(home, { recursive: true, force: true })
      unkilled.delete(home)
    }
  }
}

module.exports = { createPm2 }
