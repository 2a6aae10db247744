'use strict'

/**
 * PM2's "run the job on instance 0 only" idiom,
 * `if (process.env.NODE_APP_INSTANCE === '0') setInterval(job, 60000)`.
 * Under clusterize (as under PM2) a reload keeps the old worker 0 draining,
 * its timers still running, while the new worker 0 starts its own: for the
 * length of the reload the job runs twice. Started from an app file rather
 * than an ecosystem file, NODE_APP_INSTANCE is not even set and the job
 * never runs. singleton() is the fix: one runner in the cluster, handed over
 * only once the old one has stopped.
 *
 * A read of process.env cannot be observed (Node refuses accessors on it,
 * and a Proxy in its place would change what every library sees), so the
 * app's own source is read instead: its modules outside node_modules that
 * both name NODE_APP_INSTANCE (or CLUSTERIZE_WORKER_ID) and start a timer or
 * schedule a job. One warning, from worker 0 of the first generation.
 */

const fs = require('fs')
const path = require('path')
const debug = require('debug')('clusterize:worker')

const INSTANCE_VARS = /\b(NODE_APP_INSTANCE|CLUSTERIZE_WORKER_ID)\b/
const TIMERS = /\b(setInterval|setTimeout|scheduleJob)\s*\(|\.schedule\s*\(|\bCronJob\b|\bcron\.schedule\b/
/** Bounds on what is read: the app's own files, not a monorepo. */
const MAX_FILES = 300
const MAX_BYTES = 512 * 1024
/** clusterize's own code (its CLI is the main module of a worker it starts). */
const LIBRARY = [path.join(__dirname, '..'), path.join(__dirname, '..', '..', 'bin')]

/**
 * The app's files that contain the idiom.
 * @param {string[]} files candidate module paths
 * @returns {string[]}
 */
function findInstanceJobs (files) {
  const found = []
  let read = 0
  for (const file of files) {
    if (read >= MAX_FILES) break
    if (!isAppSource(file)) continue
    read++
    let source
    try {
      if (fs.statSync(file).size > MAX_BYTES) continue
      source = stripComments(fs.readFileSync(file, 'utf8'))
    } catch {
      continue
    }
    if (INSTANCE_VARS.test(source) && TIMERS.test(source)) found.push(file)
  }
  return found
}

function isAppSource (file) {
  return typeof file === 'string' && /\.(c|m)?(j|t)sx?$/.test(file) && !file.split(path.sep).includes('node_modules') &&
    !LIBRARY.some((dir) => file.startsWith(dir + path.sep)) && path.isAbsolute(file)
}

/** Comments that mention the idiom are not the idiom. */
function stripComments (source) {
  return source.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1')
}

/**
 * The modules the app loaded (CommonJS, from require.cache) plus its entry file.
 * @param {string|null} entry the app file, when clusterize was given one
 * @returns {string[]}
 */
function appModules (entry) {
  const files = new Set()
  if (entry) files.add(path.resolve(entry))
  if (require.main && require.main.filename) files.add(require.main.filename)
  for (const file of Object.keys(require.cache)) files.add(file)
  return [...files]
}

/**
 * Warn once (worker 0, first generation) when the app's own code has the idiom.
 * @param {{ warn: Function }} log
 * @param {{ workers: number, entry: string|null, env: NodeJS.ProcessEnv }} context
 * @returns {string[]} the files found (for tests)
 */
function warnOnInstanceJobs (log, { workers, entry, env }) {
  if (!(workers > 1) || env.CLUSTERIZE_WORKER_ID !== '0' || (env.CLUSTERIZE_GENERATION || '1') !== '1') return []
  const files = findInstanceJobs(appModules(entry))
  debug('instance-0 job idiom in %o', files)
  if (files.length === 0) return files
  log.warn(instanceJobWarning(files, env.NODE_APP_INSTANCE === undefined || env.NODE_APP_INSTANCE === ''), { pid: process.pid })
  return files
}

function instanceJobWarning (files, unset) {
  const where = files.map((file) => path.relative(process.cwd(), file) || file).join(', ')
  return `${where} reads the instance number and starts a timer: the PM2 idiom of running a job on instance 0 only ` +
    "(if (process.env.NODE_APP_INSTANCE === '0') setInterval(job, ...)) runs it twice while a reload replaces worker 0 " +
    '(the old worker 0 keeps its timers while it drains)' +
    (unset ? ', and here NODE_APP_INSTANCE is not set (it is only when started from an ecosystem file), so it may never run' : '') +
    ". Run it with clusterize's singleton(): singleton('job', (signal) => { const t = setInterval(job, 60000); " +
    "signal.addEventListener('abort', () => clearInterval(t)) }): one runner in the cluster, handed over once the old one stopped " +
    '(see docs/coming-from-pm2.md)'
}

module.exports = { warnOnInstanceJobs, findInstanceJobs, instanceJobWarning }
