'use strict'

/**
 * clusterize-express: the public surface. Nothing else is public.
 */

const cluster = require('cluster')
const { resolveConfig } = require('./config')
const errors = require('./errors')
const { lazyValue } = require('./lazy')
const { guardStdio } = require('./safe-write')
const offloadErrors = require('./pool/errors')
const { SessionHttpError } = require('./session/http-error')
const { SessionStoreUnavailableError } = require('./session/unavailable')
const { SessionTooLargeError } = require('./session/too-large')
const { ClusterizeBusError } = require('./bus/errors')
const { CliUsageError, CliRuntimeError } = require('./cli/errors')

/**
 * Run an Express app on every core.
 *
 * In the primary this forks and supervises workers and returns the primary
 * handle; in a worker it builds the app, listens and returns
 * `{ app, server, id, generation, ready }`; with `workers: 0` it runs in one
 * process with the primary's handle.
 *
 * @param {Function|string} createApp a factory returning (or resolving to) an
 *   Express app, a (req, res) listener or an http.Server; or a module path
 * @param {object} [options] see README.md, "Options", and docs/supervision.md
 * @returns {object} the handle
 */
function clusterize (createApp, options) {
  if (typeof createApp !== 'function' && typeof createApp !== 'string') {
    throw new errors.ClusterizeOptionError(
      'clusterize: the first argument must be a function returning an Express app (or a module path), got ' +
      (createApp === null ? 'null' : typeof createApp), 'createApp')
  }
  // Before anything is logged: a stdout or stderr whose reader goes away must not end this process.
  guardStdio()
  if (cluster.isWorker && process.env.CLUSTERIZE_WORKER_ID !== undefined) {
    return require('./worker').startWorker(createApp, resolveConfig(options))
  }
  const config = resolveConfig(options)
  if (config.workers === 0) {
    return require('./worker/standalone').startStandalone(createApp, config)
  }
  return require('./primary').startPrimary(createApp, config)
}

/**
 * Whether `handle` is the primary's (in the primary, or with `workers: 0`)
 * rather than a worker's: a type guard for TypeScript users.
 * @param {object} handle what clusterize() returned
 * @returns {boolean}
 */
function isPrimary (handle) {
  return handle !== null && typeof handle === 'object' && typeof handle.reload === 'function' && typeof handle.stats === 'function'
}

module.exports = {
  clusterize,
  isPrimary,
  onDrain: require('./lifecycle').onDrain,
  // Loaded on first use: a primary never needs express-session or worker_threads.
  offload: lazyValue('offload', () => require('../middleware/offload')),
  session: lazyValue('session', () => require('../middleware/session')),
  bus: lazyValue('bus', () => require('./bus').bus, 'object'),
  // Work that runs on one worker of the cluster (of the fleet with bus.redis).
  singleton: lazyValue('singleton', () => require('./state/singleton').singleton),
  // The error catalogue (docs/errors.md): every class, whatever part throws it.
  ClusterizeError: errors.ClusterizeError,
  ClusterizeOptionError: errors.ClusterizeOptionError,
  ClusterizeTimeoutError: errors.ClusterizeTimeoutError,
  ClusterizeAppError: errors.ClusterizeAppError,
  ClusterizeBusError,
  OffloadError: offloadErrors.OffloadError,
  QueueFullError: offloadErrors.QueueFullError,
  TaskTimeoutError: offloadErrors.TaskTimeoutError,
  TaskAbortedError: offloadErrors.TaskAbortedError,
  TaskError: offloadErrors.TaskError,
  ThreadExitError: offloadErrors.ThreadExitError,
  ThreadStartupError: offloadErrors.ThreadStartupError,
  PoolClosedError: offloadErrors.PoolClosedError,
  CloneError: offloadErrors.CloneError,
  OuterVariableError: offloadErrors.OuterVariableError,
  InvalidTaskError: offloadErrors.InvalidTaskError,
  OffloadOptionError: offloadErrors.OffloadOptionError,
  SessionHttpError,
  SessionStoreUnavailableError,
  SessionTooLargeError,
  CliUsageError,
  CliRuntimeError
}
