'use strict'

/**
 * Faults from a schedule: [{ at, fault, ms }], `at` ms after the run starts,
 * run one after another and written into the history (history.faults).
 *
 *   stop-primary ms      SIGSTOP the primary, SIGCONT after ms
 *   block-primary ms     an app's bus.handle handler busy-waits ms in the primary
 *   stop-holder-primary  (two hosts) SIGSTOP the primary of the host whose worker wrote last as singleton holder
 *   kill-worker          SIGKILL a worker (the supervisor forks another)
 *   stop-worker ms       SIGSTOP a worker, SIGCONT after ms
 *   reload               SIGUSR2: a rolling reload of the workers
 *   upgrade              SIGURG: `clusterize upgrade`, a new primary takes over
 *   kill-primary         SIGKILL the primary (its workers exit with it) and start it again on the same port
 *   kill-redis ms        SIGKILL the private redis-server, start it again after ms (append-only file: nothing acknowledged is lost)
 *   stop-redis ms        SIGSTOP the private redis-server, SIGCONT after ms
 */

const { eventually } = require('../helpers/wait')
const { request } = require('../helpers/cluster')
const { isAlive } = require('../../lib/process-alive')
const { sleep } = require('./clients')

const KINDS = ['stop-primary', 'block-primary', 'stop-holder-primary', 'kill-worker', 'stop-worker', 'reload', 'upgrade', 'kill-primary', 'kill-redis', 'stop-redis']

/**
 * @param {{ schedule: object[], clusters: object[], redis?: object, history: object, random: () => number, startedAt: number }} run
 * @returns {Promise<void>} once every fault ran and the clusters settled after it
 */
async function runFaults ({ schedule, clusters, redis, history, random, startedAt }) {
  for (const step of schedule) {
    if (!KINDS.includes(step.fault)) throw new Error(`unknown fault ${step.fault}: one of ${KINDS.join(', ')}`)
    const wait = startedAt + step.at - Date.now()
    if (wait > 0) await sleep(wait)
    await inject(step, { clusters, redis, history, random })
  }
}

async function inject (step, { clusters, redis, history, random }) {
  const cluster = clusters[0]
  switch (step.fault) {
    case 'stop-primary':
      return stopFor(history, cluster.primaryPid, 'primary', step)
    case 'stop-holder-primary': {
      const holder = lastWriter(history)
      for (const c of clusters) await c.refresh()
      const host = clusters.find((c) => c.workerPids.includes(holder)) || cluster
      return stopFor(history, host.primaryPid, `primary of holder ${holder}`, step)
    }
    case 'block-primary': {
      history.fault(step.fault, { target: cluster.primaryPid, ms: step.ms })
      const res = await request(cluster.port, `/block-primary?ms=${step.ms}`, { timeoutMs: step.ms + 30000 }).catch((err) => ({ status: err.message }))
      if (res.status !== 200) history.fault('block-primary-failed', { detail: res.status })
      return
    }
    case 'kill-worker': {
      await cluster.refresh()
      const pid = pick(cluster.workerPids, random)
      history.fault(step.fault, { target: pid })
      cluster.signal(pid, 'SIGKILL')
      return cluster.settled()
    }
    case 'stop-worker': {
      await cluster.refresh()
      return stopFor(history, pick(cluster.workerPids, random), 'worker', step)
    }
    case 'reload':
      history.fault(step.fault, { target: cluster.primaryPid })
      await cluster.refresh()
      {
        const old = new Set(cluster.workerPids)
        cluster.signal(cluster.primaryPid, 'SIGUSR2')
        await eventually(async () => (await cluster.refresh()) && cluster.workerPids.length > 0 && cluster.workerPids.every((pid) => !old.has(pid)), { timeoutMs: 60000, intervalMs: 200, what: () => 'the reload\n' + cluster.output })
      }
      return cluster.settled()
    case 'upgrade': {
      const old = cluster.primaryPid
      history.fault(step.fault, { target: old })
      cluster.signal(old, 'SIGURG')
      await eventually(async () => (await cluster.refresh()) && cluster.primaryPid !== old, { timeoutMs: 90000, intervalMs: 200, what: () => 'the new primary\n' + cluster.output })
      await eventually(() => !isAlive(old), { timeoutMs: 60000, intervalMs: 100, what: () => `the old primary ${old} to exit\n` + cluster.output })
      return cluster.settled()
    }
    case 'kill-primary': {
      await cluster.refresh()
      history.fault(step.fault, { target: cluster.primaryPid })
      const workers = cluster.workerPids.slice()
      cluster.signal(cluster.primaryPid, 'SIGKILL')
      await eventually(() => !isAlive(cluster.primaryPid) && workers.every((pid) => !isAlive(pid)), { timeoutMs: 20000, intervalMs: 50, what: 'the killed primary and its workers to be gone' })
      return cluster.relaunch()
    }
    case 'kill-redis':
      history.fault(step.fault, { target: redis.pid, ms: step.ms })
      await redis.stop()
      await sleep(step.ms)
      await redis.start()
      return
    case 'stop-redis':
      return stopFor(history, redis.pid, 'redis', step)
  }
}

async function stopFor (history, pid, target, step) {
  history.fault(step.fault, { target: `${target} ${pid}`, ms: step.ms })
  process.kill(pid, 'SIGSTOP')
  try {
    await sleep(step.ms)
  } finally {
    process.kill(pid, 'SIGCONT')
  }
}

function lastWriter (history) {
  const ops = history.ops()
  for (let i = ops.length - 1; i >= 0; i--) {
    if (ops[i].op === 'write') return ops[i].value.pid
  }
  throw new Error('no singleton holder wrote yet')
}

function pick (list, random) {
  if (!list.length) throw new Error('no worker to pick')
  return list[Math.floor(random() * list.length)]
}

module.exports = { runFaults, KINDS }
