'use strict'

/**
 * Before the app loads in a worker (or the single process): the app-state
 * pitfalls of several workers, noticed or fixed without a code change:
 * - express-rate-limit's default MemoryStore: warned about, or (with
 *   defaultRateLimitStore 'cluster') made a cluster store (./rate-limit-pitfall.js);
 * - node-cron v4: the cluster's run coordinator becomes its default, so
 *   `distributed: true` tasks fire once per cluster with no env var; tasks
 *   scheduled without it are warned about once they run on several workers;
 * - the cron package's CronJob, built in several workers: warned about
 *   (./cron-job-pitfall.js).
 */

const path = require('path')
const debug = require('debug')('clusterize:state')
const { watchRateLimitStores } = require('./rate-limit-pitfall')
const { watchCronJobs } = require('./cron-job-pitfall')

/** Tasks scheduled after startup (a lazy route, a later import) get a second look. */
const RECHECK_CRON_MS = 10000

/**
 * @param {{ appDir: string, config: object, log: object, workers: number }} context
 * @returns {Promise<{ afterBuild: () => void }>}
 */
async function prepareAppState ({ appDir, config, log, workers }) {
  await watchRateLimitStores(log, workers, appDir, { useCluster: config.defaultRateLimitStore === 'cluster' })
  watchCronJobs(log, workers, appDir)
  let copies = []
  try {
    copies = await require('../state/cron').useCronCoordinator(appDir)
  } catch (err) {
    debug('node-cron coordinator not installed: %s', err.message)
  }
  return {
    afterBuild () {
      if (copies.length === 0) return
      const { warnOnUncoordinatedCron } = require('../state/cron')
      const check = warnOnUncoordinatedCron(copies, log, workers)
      setTimeout(check, RECHECK_CRON_MS).unref()
    }
  }
}

/** Where the app's own require() starts: its module's folder, else the main script's. */
function appDirOf (createApp) {
  if (typeof createApp === 'string') return path.dirname(path.resolve(createApp))
  return require.main && require.main.filename ? path.dirname(require.main.filename) : process.cwd()
}

module.exports = { prepareAppState, appDirOf }
