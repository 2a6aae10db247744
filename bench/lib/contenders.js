'use strict'

/**
 * Start one contender (single process, textbook cluster, clusterize, PM2)
 * on a free loopback port and give it a uniform face: port, pids, memory,
 * stop(). Everything started is stopped by PID (PM2 by `pm2 kill`).
 */

const path = require('path')
const { startProcess, waitForLine, waitForHttp, stopProcess, rssMiB, childrenOf, treeMemory, freePort, sleep } = require('./proc')
const { createPm2 } = require('./pm2')
const { isAlive } = require('../../lib/process-alive')

const SERVERS = path.join(__dirname, 'servers.js')

/**
 * @param {'single'|'cluster'|'clusterize'} kind
 * @param {{ app?: string, options?: object, node?: string, label?: string, env?: object, execArgv?: string[], port?: number }} [spec]
 */
async function startLocal (kind, spec) {
  spec = spec || {}
  // spec.port: start again on the port a stopped contender used (bench/upgrade.js).
  const port = spec.port || await freePort()
  // Node flags (say --max-old-space-size) go before the script; cluster workers inherit them.
  const args = (spec.execArgv || []).concat([SERVERS, kind, String(port), spec.app || 'hello'])
  if (spec.options) args.push(JSON.stringify(spec.options))
  const proc = startProcess({ args, node: spec.node, env: spec.env, name: spec.label || kind })
  try {
    const line = await waitForLine(proc, /^READY /, 30000)
    await waitForHttp(port, 10000)
    return {
      label: spec.label || kind,
      port,
      proc,
      readyLine: line,
      /** { primary: MiB, workers: [MiB] } (single: primary only) */
      memory () {
        const workers = childrenOf(proc.pid).map(rssMiB).filter((v) => v !== null)
        return { primary: rssMiB(proc.pid), workers }
      },
      workerPids () {
        return childrenOf(proc.pid)
      },
      /** Every PID of this contender (primary first). */
      allPids () {
        return [proc.pid].concat(childrenOf(proc.pid))
      },
      /** RSS and PSS (MiB) of the primary and everything below it. */
      tree () {
        return treeMemory(proc.pid)
      },
      signal (name) {
        process.kill(proc.pid, name)
      },
      /** The primary still runs. */
      isAlive () {
        return proc.child.exitCode === null && proc.child.signalCode === null
      },
      stop () {
        return stopProcess(proc)
      }
    }
  } catch (err) {
    await stopProcess(proc)
    throw err
  }
}

/** PM2 cluster mode with `instances` workers, private PM2_HOME. */
async function startPm2 (spec) {
  spec = spec || {}
  const port = await freePort()
  const pm2 = createPm2()
  const name = 'cz-bench'
  try {
    await pm2.start(SERVERS, {
      name,
      instances: spec.instances,
      args: ['pm2-app', '', spec.app || 'hello'],
      nodeArgs: spec.execArgv,
      env: Object.assign({ PORT: String(port) }, spec.env)
    })
    await waitForHttp(port, 30000)
    await waitOnline(pm2, name, spec.instances)
  } catch (err) {
    await pm2.kill()
    throw err
  }
  return {
    label: spec.label || 'PM2 cluster mode',
    port,
    pm2,
    async memory () {
      const mem = await pm2.memory(name)
      return { primary: mem.daemon, workers: mem.instances }
    },
    async workerPids () {
      return (await pm2.list()).filter((app) => app.name === name).map((app) => app.pid)
    },
    async allPids () {
      return [pm2.daemonPid()].concat(await this.workerPids())
    },
    /** RSS and PSS (MiB) of PM2's daemon and every process below it (its apps). */
    tree () {
      return treeMemory(pm2.daemonPid())
    },
    reload () {
      return pm2.reload(name)
    },
    /** The PM2 daemon still runs. */
    isAlive () {
      const pid = pm2.daemonPid()
      return pid !== null && isAlive(pid)
    },
    stop () {
      return pm2.kill()
    }
  }
}

async function waitOnline (pm2, name, instances) {
  for (let i = 0; i < 100; i++) {
    const apps = (await pm2.list()).filter((app) => app.name === name)
    if (apps.length === instances && apps.every((app) => app.pm2_env.status === 'online')) return
    await sleep(200)
  }
  throw new Error('PM2 instances did not come online')
}

module.exports = { startLocal, startPm2 }
