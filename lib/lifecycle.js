'use strict'

/**
 * The process lifecycle that code running in a worker may hook into without
 * depending on the worker runtime (lib/worker runs these hooks; realtime and
 * app-state code register them).
 *
 * The app's own goodbye before a worker drains: `onDrain(fn)` registers a
 * function that runs when this process starts draining (reload, recycle,
 * shutdown), before the default close of WebSockets and kept-alive
 * connections. It may return a promise; the drain waits for it until the
 * drain deadline (`reload.drainTimeoutMs`, or `shutdown.timeoutMs`).
 */

const { ClusterizeError } = require('./errors')

const hooks = new Set()

/**
 * @param {(info: { reason: string, deadline: number }) => (void|Promise<void>)} fn
 *   `reason` is 'reload', 'memory', 'shutdown' or 'primary-gone'; `deadline` is a Date.now() value
 * @returns {() => void} removes the hook
 */
function onDrain (fn) {
  return register(hooks, fn, 'onDrain')
}

/**
 * Run every hook; resolve when all have settled or the deadline passes.
 * @param {{ reason: string, deadline: number }} info
 * @param {object} [log] internal logger, for hooks that throw
 */
function runDrainHooks (info, log) {
  if (hooks.size === 0) return Promise.resolve()
  return runBounded(hooks, info, log, 'onDrain hook')
}

/**
 * Library code's last word before a draining worker reports drained and
 * exits: functions registered here run once its connections are closed
 * (or destroyed at the deadline), e.g. to make sure state written on
 * disconnect (socket.io sessions to recover) has reached the primary.
 * They get at least CLOSED_GRACE_MS even when the drain deadline has
 * passed; the primary's backstop (SIGKILL) comes 2 s after the deadline.
 */
const closedHooks = new Set()
const CLOSED_GRACE_MS = 1000

/**
 * @param {(info: { reason: string, deadline: number }) => (void|Promise<void>)} fn
 * @returns {() => void} removes the hook
 */
function onConnectionsClosed (fn) {
  return register(closedHooks, fn, 'onConnectionsClosed')
}

/** Add `fn` to `set`; the returned function removes it. */
function register (set, fn, name) {
  if (typeof fn !== 'function') throw new ClusterizeError(`${name}(fn): fn must be a function, got ${typeof fn}`, 'ERR_CLUSTERIZE_DRAIN_HANDLER')
  set.add(fn)
  return function removeHook () { set.delete(fn) }
}

/**
 * Run the onConnectionsClosed hooks, bounded like runDrainHooks (with at least CLOSED_GRACE_MS).
 * @param {{ reason: string, deadline: number }} info
 * @param {object} [log]
 */
function runConnectionsClosedHooks (info, log) {
  if (closedHooks.size === 0) return Promise.resolve()
  return runBounded(closedHooks, { reason: info.reason, deadline: Math.max(info.deadline, Date.now() + CLOSED_GRACE_MS) }, log, 'drain hook')
}

/** Run every function of `set` with `info`; resolve when all settled or `info.deadline` passes. */
function runBounded (set, info, log, what) {
  const runs = Array.from(set, (fn) => Promise.resolve().then(() => fn(info)).catch((err) => {
    if (log) log.error(`${what} failed: ${err && err.message}`, { pid: process.pid })
  }))
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, Math.max(0, info.deadline - Date.now()))
    timer.unref()
    Promise.all(runs).then(() => {
      clearTimeout(timer)
      resolve()
    })
  })
}

module.exports = { onDrain, runDrainHooks, onConnectionsClosed, runConnectionsClosedHooks }
