'use strict'

/**
 * A history cluster: ./primary.js started as its own process (so that
 * `clusterize upgrade` can replace it), its workers found through the probes
 * server's /stats, and every process it ever had killed by PID at the end.
 */

const { spawn } = require('child_process')
const path = require('path')
const { request } = require('../helpers/cluster')
const { freePort } = require('../helpers/net')
const { eventually } = require('../helpers/wait')
const { isAlive } = require('../../lib/process-alive')

const PRIMARY = path.join(__dirname, 'primary.js')
/** Clusters not stopped yet: killed by PID if the test process exits first. */
const running = new Set()

/**
 * @param {object} options CZ_HISTORY for the primary (port: a free one when not given)
 * @returns {Promise<object>} the cluster: port, primaryPid, workers(), refresh(), signal..., stop()
 */
async function startHistoryCluster (options) {
  const port = options.port || await freePort()
  const env = Object.assign({}, process.env, { CZ_HISTORY: JSON.stringify(Object.assign({}, options, { port })) })
  const cluster = {
    port,
    probesPort: null,
    primaryPid: null,
    workerPids: [],
    pids: new Set(),
    output: '',
    child: null,
    /** Ask the current primary's /stats for its pid and workers (it may be stopped: bounded). */
    async refresh () {
      try {
        const res = await request(cluster.probesPort, '/stats', { timeoutMs: 3000 })
        if (res.status !== 200 || !res.json) return false
        if (res.json.pid) cluster.primaryPid = res.json.pid
        cluster.workerPids = (res.json.workers || []).map((w) => w.pid).filter(Boolean)
        cluster.pids.add(cluster.primaryPid)
        for (const pid of cluster.workerPids) cluster.pids.add(pid)
        return true
      } catch {
        return false
      }
    },
    /** Resolve once every worker slot is ready again (after a kill, a reload, an upgrade). */
    async settled (timeoutMs) {
      await eventually(async () => {
        try {
          const res = await request(cluster.probesPort, '/stats', { timeoutMs: 3000 })
          const workers = (res.json && res.json.workers) || []
          const ready = workers.filter((w) => w.state === 'ready' || w.state === 'listening')
          if (res.json && res.json.pid) cluster.primaryPid = res.json.pid
          for (const w of workers) if (w.pid) cluster.pids.add(w.pid)
          cluster.pids.add(cluster.primaryPid)
          cluster.workerPids = ready.map((w) => w.pid)
          return ready.length >= (options.workers || 2) && (await request(port, '/whoami', { timeoutMs: 3000 })).status === 200
        } catch {
          return false
        }
      }, { timeoutMs: timeoutMs || 60000, intervalMs: 100, what: () => 'the history cluster to be ready\n' + cluster.output })
    },
    signal (pid, name) {
      try { process.kill(pid, name); return true } catch { return false }
    },
    async stop () {
      running.delete(cluster)
      for (const pid of cluster.pids) if (pid) cluster.signal(pid, 'SIGCONT')
      if (cluster.primaryPid && isAlive(cluster.primaryPid)) {
        cluster.signal(cluster.primaryPid, 'SIGTERM')
        await eventually(() => !isAlive(cluster.primaryPid), { timeoutMs: 15000, intervalMs: 50 }).catch(() => {})
      }
      for (const pid of cluster.pids) {
        if (pid && isAlive(pid)) cluster.signal(pid, 'SIGKILL')
      }
    }
  }
  running.add(cluster)
  try {
    await launch(cluster, env)
  } catch (err) {
    await cluster.stop()
    throw err
  }
  return cluster
}

/** Start (or, after a SIGKILL of the primary, start again) the primary on the cluster's port. */
async function launch (cluster, env) {
  const child = spawn(process.execPath, [PRIMARY], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  cluster.child = child
  cluster.primaryPid = child.pid
  cluster.pids.add(child.pid)
  cluster.relaunch = () => launch(cluster, env)
  const ready = new Promise((resolve, reject) => {
    let buffered = ''
    child.stdout.on('data', (chunk) => {
      cluster.output += chunk
      buffered += chunk
      const line = buffered.split('\n').find((l) => l.startsWith('{"historyReady"'))
      if (line) resolve(JSON.parse(line))
    })
    child.stderr.on('data', (chunk) => { cluster.output = (cluster.output + chunk).slice(-20000) })
    child.once('exit', (code, signal) => reject(new Error(`history primary exited before ready (${code}, ${signal})\n${cluster.output}`)))
  })
  let timer
  const info = await Promise.race([ready, new Promise((resolve, reject) => { timer = setTimeout(() => reject(new Error('history primary not ready in 60 s\n' + cluster.output)), 60000) })]).finally(() => clearTimeout(timer))
  cluster.probesPort = info.probesPort
  await cluster.settled()
  return cluster
}

process.on('exit', function killLeftovers () {
  for (const cluster of running) {
    for (const pid of cluster.pids) {
      try { process.kill(pid, 'SIGCONT'); process.kill(pid, 'SIGKILL') } catch {}
    }
  }
})

module.exports = { startHistoryCluster }
