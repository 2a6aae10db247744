'use strict'

/**
 * The app's own goodbye before a worker drains: `onDrain(fn)` registers a
 * function that runs when this process starts draining (reload, recycle,
 * shutdown), before the default close of WebSockets and kept-alive
 * connections. It may return a promise; the drain waits for it until the
 * drain deadline (`reload.drainTimeoutMs`, or `shutdown.timeoutMs`).
 */

const hooks = new Set()

/**
 * @param {(info: { reason: string, deadline: number }) => (void|Promise<void>)} fn
 *   `reason` is 'reload', 'memory', 'shutdown' or 'primary-gone'; `deadline` is a Date.now() value
 * @returns {() => void} removes the hook
 */
function onDrain (fn) {
  if (typeof fn !== 'function') throw new TypeError('onDrain(fn): fn must be a function')
  hooks.add(fn)
  return function removeDrainHook () { hooks.delete(fn) }
}

/**
 * Run every hook; resolve when all have settled or the deadline passes.
 * @param {{ reason: string, deadline: number }} info
 * @param {object} [log] internal logger, for hooks that throw
 */
function runDrainHooks (info, log) {
  if (hooks.size === 0) return Promise.resolve()
  const runs = Array.from(hooks, (fn) => Promise.resolve().then(() => fn(info)).catch((err) => {
    if (log) log.error(`onDrain hook failed: ${err && err.message}`, { pid: process.pid })
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

module.exports = { onDrain, runDrainHooks }
