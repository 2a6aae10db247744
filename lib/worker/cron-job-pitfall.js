'use strict'

/**
 * The `cron` package (CronJob) under several workers: it has no coordination
 * of its own, so every worker runs every job. One warning per worker, naming
 * the fix (singleton(), or node-cron's distributed: true), unless the job is
 * built inside a singleton (lib/state/singleton-context.js).
 *
 * CronJob assigns its public `lastExecution` field when it is built: a
 * setter on its prototype sees each construction and turns it back into an
 * ordinary own property (as ./pitfalls.js does for express-session).
 */

const { currentSingleton } = require('../state/singleton-context')
const { appDeclares } = require('../package-copies')

const kWatched = Symbol.for('clusterize.cronJobWatched')
let settings = null
let reported = false

/**
 * @param {{ warn: Function }} log
 * @param {number} workers
 * @param {string} appDir
 * @returns {boolean} whether a `cron` package was found and watched
 */
function watchCronJobs (log, workers, appDir) {
  if (!(workers > 1) || !appDeclares('cron', appDir)) return false
  let CronJob
  try {
    CronJob = require(require.resolve('cron', { paths: [appDir, process.cwd()] })).CronJob
  } catch {
    return false
  }
  if (typeof CronJob !== 'function') return false
  settings = { log, workers }
  const proto = CronJob.prototype
  if (proto[kWatched]) return true
  proto[kWatched] = true
  Object.defineProperty(proto, 'lastExecution', {
    configurable: true,
    get () { return undefined },
    set: function lastExecutionOfNewCronJob (value) {
      Object.defineProperty(this, 'lastExecution', { value, writable: true, enumerable: true, configurable: true })
      if (settings === null || reported || currentSingleton() !== null) return
      reported = true
      settings.log.warn(`a CronJob (the cron package) is scheduled in each of the ${settings.workers} workers, so it runs ${settings.workers} times per tick: ` +
        "build it inside clusterize's singleton(name, (signal) => { const job = CronJob.from({ ... }); signal.addEventListener('abort', () => job.stop()) }), " +
        'or use node-cron with { name, distributed: true }', { pid: process.pid })
    }
  })
  return true
}

/** Stop warning (tests). */
function unwatchCronJobs () {
  settings = null
  reported = false
}

module.exports = { watchCronJobs, unwatchCronJobs }
