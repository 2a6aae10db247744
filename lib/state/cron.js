'use strict'

/**
 * node-cron v4 under clusterize: a run coordinator for `distributed: true`
 * (node-cron's documented RunCoordinator: `shouldRun(key, ttlMs)`), whose
 * claims the primary holds (Redis with bus.redis), so
 * `cron.schedule(expr, fn, { name, distributed: true })` fires on one worker
 * of the cluster (one host of the fleet) with no per-worker env var.
 *
 * A worker installs it as node-cron's default coordinator
 * (cron.setRunCoordinator, node-cron's public API) before the app loads, for
 * each copy of node-cron the app can load (its CommonJS and its ESM build
 * are two module instances). A coordinator the app sets (globally or per
 * task) wins. When the primary does not answer, shouldRun fails and
 * node-cron skips that fire (fail closed: never twice).
 */

const { packageCopies, appDeclares } = require('../package-copies')
const debug = require('debug')('clusterize:cron')
const { ClusterizeError } = require('../errors')
const { serviceClient } = require('./client')
const { cronService, CRON_OP } = require('./cron-service')
const { currentSingleton } = require('./singleton-context')

const CLAIM_TIMEOUT_MS = 2000
/** Fires this process asked about recently (the pitfall check tells coordinated runs apart). */
const asked = new Set()
const MAX_ASKED = 1000

/**
 * node-cron's RunCoordinator, backed by the primary.
 * @param {{ client?: object, timeoutMs?: number }} [options] client: internal (tests)
 * @returns {{ shouldRun: (key: string, ttlMs: number) => Promise<boolean> }}
 */
function cronCoordinator (options) {
  options = options || {}
  let client = options.client || null
  const timeoutMs = options.timeoutMs || CLAIM_TIMEOUT_MS
  return {
    shouldRun: async function shouldRun (key, ttlMs) {
      remember(key)
      if (client === null) client = serviceClient(cronService)
      const data = { key: String(key), ttlMs: Number.isInteger(ttlMs) && ttlMs > 0 ? ttlMs : 30000 }
      const first = await bounded(client.request(CRON_OP.CLAIM, data, { timeoutMs }), timeoutMs, key)
      debug('%s: %s', key, first ? 'runs here' : 'runs elsewhere')
      return first === true
    }
  }
}

/** A claim that gets no answer fails (node-cron then skips the fire) instead of holding the fire forever. */
function bounded (pending, timeoutMs, key) {
  return new Promise(function race (resolve, reject) {
    const timer = setTimeout(() => reject(new ClusterizeError(`cron run ${key}: the primary did not answer within ${timeoutMs} ms`, 'ERR_CLUSTERIZE_CRON_TIMEOUT')), timeoutMs)
    timer.unref()
    Promise.resolve(pending).then(function answered (value) {
      clearTimeout(timer)
      resolve(value)
    }, function failed (err) {
      clearTimeout(timer)
      reject(err)
    })
  })
}

function remember (key) {
  if (asked.size >= MAX_ASKED) asked.delete(asked.values().next().value)
  asked.add(String(key))
}

/**
 * The node-cron modules the app can load from `appDir`: its CommonJS entry
 * and its ESM entry, loaded (node-cron has no dependencies).
 * @param {string} appDir
 * @returns {Promise<object[]>} module namespaces with setRunCoordinator (v4)
 */
function nodeCronCopies (appDir) {
  return packageCopies('node-cron', appDir, (exports) => exports.setRunCoordinator)
}

/**
 * Make the cluster's coordinator node-cron's default, in every copy the
 * app can load. Before the app loads: node-cron picks a task's coordinator
 * when the task is scheduled.
 * @param {string} appDir
 * @returns {Promise<object[]>} the copies (for the pitfall check)
 */
async function useCronCoordinator (appDir) {
  if (!appDeclares('node-cron', appDir)) return []
  const copies = await nodeCronCopies(appDir)
  const coordinator = cronCoordinator()
  for (const copy of copies) copy.setRunCoordinator(coordinator)
  if (copies.length > 0) debug('node-cron: the cluster run coordinator is the default (%d module copies)', copies.length)
  return copies
}

/**
 * Warn once when a node-cron task runs a scheduled fire that the cluster's
 * coordinator was never asked about (no `distributed: true`): with several
 * workers it runs once per worker. Watches the tasks scheduled so far
 * (call again later for tasks scheduled after startup).
 * @param {object[]} copies from useCronCoordinator
 * @param {{ warn: Function }} log
 * @param {number} workers
 * @returns {() => void} check again (new tasks)
 */
function warnOnUncoordinatedCron (copies, log, workers) {
  const watched = new WeakSet()
  let warned = false
  function check () {
    if (!(workers > 1) || warned) return
    for (const copy of copies) {
      if (typeof copy.getTasks !== 'function') continue
      for (const task of copy.getTasks().values()) {
        if (watched.has(task) || typeof task.on !== 'function') continue
        watched.add(task)
        task.on('execution:started', function checkCoordinated (context) {
          if (warned || !context || !context.execution || context.execution.reason !== 'scheduled') return
          // Scheduled inside a singleton: it runs on one worker.
          if (currentSingleton() !== null) return
          const key = `${task.name}:${context.date instanceof Date ? context.date.toISOString() : ''}`
          if (asked.has(key)) return
          warned = true
          log.warn(`node-cron task "${task.name || task.id}" runs on every one of the ${workers} workers: schedule it with ` +
            "{ name, distributed: true } (clusterize makes it run once per fire across the cluster), or use clusterize's singleton(name, start)", { pid: process.pid })
        })
      }
    }
  }
  check()
  return check
}

module.exports = { cronCoordinator, useCronCoordinator, warnOnUncoordinatedCron, nodeCronCopies }
