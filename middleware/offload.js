'use strict'

/**
 * Express adapter for the offload thread pool: `app.use(offload())` installs
 * `req.offload(task, ...args)`; `offload.route(task, mapReq)` is a ready-made
 * handler that answers with the task's result as JSON.
 */

const { Pool } = require('../lib/pool')
const { normalizeOptions } = require('../lib/pool/options')
const { resolveTask, moduleTask, transfer } = require('../lib/pool/task')
const errors = require('../lib/pool/errors')

const kAbort = Symbol('clusterize.offload.abort')

/** Pool used by offload.route() handlers mounted without offload() middleware. */
let defaultPool = null

/**
 * Create the offload middleware. Its pool (one per middleware instance) starts
 * its threads at once, so they are warm before the first request; idle threads
 * do not keep the process alive.
 * @param {object} [options] threads, maxQueue, taskTimeoutMs (30000), cancelOnDisconnect (true),
 *   terminateOnDisconnect (false), resourceLimits, setup, maxStartupFailures
 * @returns {Function} middleware with `.pool`, `.stats()` and `.close(options)`
 */
function offload (options) {
  const opts = normalizeOptions(options, { prefix: 'offload', middleware: true })
  const pool = new Pool(opts, { normalized: true })

  function offloadMiddleware (req, res, next) {
    req.offload = function offloadForRequest (task, ...args) {
      return runForRequest(pool, opts, req, res, task, args)
    }
    next()
  }

  offloadMiddleware.pool = pool
  offloadMiddleware.stats = function stats () { return pool.stats() }
  offloadMiddleware.close = function close (closeOptions) { return pool.close(closeOptions) }
  return offloadMiddleware
}

/**
 * Run a task on behalf of a request: with cancelOnDisconnect, a client that
 * goes away removes its queued task (and with terminateOnDisconnect stops the
 * running one).
 */
function runForRequest (pool, opts, req, res, task, args) {
  if (!opts.cancelOnDisconnect) return pool.exec(task, args)
  let controller = req[kAbort]
  if (controller === undefined) {
    controller = new AbortController()
    req[kAbort] = controller
    res.once('close', function onResponseClose () {
      if (!res.writableFinished) controller.abort(new Error('client disconnected'))
    })
  }
  return pool.exec(task, args, { signal: controller.signal, terminateOnAbort: opts.terminateOnDisconnect })
}

/** Created on first use; once closed (graceful shutdown) it stays closed and answers 503. */
function getDefaultPool () {
  if (defaultPool === null) {
    defaultPool = new Pool(normalizeOptions({}, { prefix: 'offload', middleware: true }), { normalized: true })
  }
  return defaultPool
}

function defaultInput (req) {
  return { params: { ...req.params }, query: { ...req.query }, body: req.body === undefined ? null : req.body }
}

/**
 * A route handler that runs `task` with the arguments `mapReq(req)` returns (an
 * array of arguments, or one value; default: `{ params, query, body }`) and
 * sends the result as JSON (204 when it is undefined). Errors are answered
 * here as JSON `{ error, code }` with the error's status (503 + Retry-After
 * when the queue is full). Uses the pool of the offload() middleware when one
 * ran before, else a shared default pool.
 * @param {Function|object} task
 * @param {(req: object) => unknown} [mapReq]
 * @returns {Function} Express handler
 */
function route (task, mapReq) {
  resolveTask(task) // fail at definition time for tasks that can never run
  if (mapReq !== undefined && typeof mapReq !== 'function') {
    throw new errors.OffloadOptionError(`offload.route: mapReq must be a function (req) => args, got ${typeof mapReq}`)
  }
  return function offloadRoute (req, res, next) {
    let input
    try {
      input = mapReq === undefined ? [defaultInput(req)] : mapReq(req)
    } catch (err) {
      return sendError(res, err, next)
    }
    Promise.resolve(input)
      .then((value) => {
        const args = Array.isArray(value) ? value : [value]
        if (typeof req.offload === 'function') return req.offload(task, ...args)
        const shared = getDefaultPool()
        return runForRequest(shared, shared.options, req, res, task, args)
      })
      .then((result) => {
        if (res.headersSent || res.destroyed) return
        if (result === undefined) res.status(204).end()
        else res.json(result)
      }, (err) => sendError(res, err, next))
  }
}

/** Status to answer for an error: its own 4xx/5xx status, else 500. */
function statusOf (err) {
  const status = err && (err.status || err.statusCode)
  return Number.isInteger(status) && status >= 400 && status <= 599 ? status : 500
}

function sendError (res, err, next) {
  if (res.headersSent) return next(err)
  if (res.destroyed) return undefined // the client is gone (cancelled task)
  const body = { error: err && err.message ? String(err.message) : 'offload task failed' }
  if (err && typeof err.code === 'string') body.code = err.code
  if (process.env.NODE_ENV !== 'production' && err && err.stack) body.stack = String(err.stack)
  if (err && err.retryAfter) res.set('Retry-After', String(err.retryAfter))
  res.status(statusOf(err)).json(body)
}

/**
 * Optional Express error handler that answers offload errors the way
 * offload.route() does (JSON `{ error, code }`, its status, Retry-After);
 * other errors go to the next error handler.
 * @returns {Function} (err, req, res, next)
 */
function errorHandler () {
  return function offloadErrorHandler (err, req, res, next) {
    if (!(err instanceof errors.OffloadError)) return next(err)
    sendError(res, err, next)
  }
}

/**
 * A thread pool for use outside Express (same pool as the middleware's, but
 * no task timeout unless `taskTimeoutMs` is given).
 * @param {object} [options] threads, maxQueue, taskTimeoutMs (0 = none), resourceLimits, setup, maxStartupFailures
 * @returns {import('../lib/pool').Pool}
 */
function pool (options) {
  return new Pool(options, { prefix: 'offload.pool' })
}

offload.route = route
offload.task = moduleTask
offload.transfer = transfer
offload.pool = pool
offload.errorHandler = errorHandler
offload.errors = errors

module.exports = offload
