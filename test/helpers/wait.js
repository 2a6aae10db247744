'use strict'

/**
 * Polling for tests; every wait is bounded.
 *
 * eventually(): until check() returns something truthy; an error thrown by
 * check() fails at once (so assertions inside it fail fast).
 * eventuallyPasses(): until attempt() stops throwing (assertions inside it are
 * retried); after the deadline the last error is thrown.
 * untilStats(): until a predicate holds on source.stats() (a pool or the
 * offload middleware), bounded by a number of checks rather than a clock.
 */

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * @param {() => any} check
 * @param {{ timeoutMs?: number, what?: string | (() => string), intervalMs?: number }} [options]
 *   `what` names the condition in the timeout error; a function is called at timeout
 *   (to include output collected meanwhile).
 * @returns {Promise<any>} the first truthy value check() returned
 */
async function eventually (check, { timeoutMs = 20000, what = 'a condition', intervalMs = 50 } = {}) {
  const until = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > until) throw new Error(`timed out waiting for ${typeof what === 'function' ? what() : what}`)
    await sleep(intervalMs)
  }
}

/**
 * @param {() => any} attempt
 * @param {{ timeoutMs?: number, intervalMs?: number }} [options]
 * @returns {Promise<any>} what the first attempt that did not throw returned
 */
async function eventuallyPasses (attempt, { timeoutMs = 20000, intervalMs = 100 } = {}) {
  const until = Date.now() + timeoutMs
  for (;;) {
    try {
      return await attempt()
    } catch (err) {
      if (Date.now() > until) throw err
      await sleep(intervalMs)
    }
  }
}

/**
 * Resolve once `predicate(source.stats())` holds: at most 500 checks, 10 ms apart
 * (polling; no timing asserts). Otherwise throws with the last stats.
 * @param {{ stats: () => object }} source
 * @param {(stats: object) => boolean} predicate
 */
async function untilStats (source, predicate) {
  for (let i = 0; i < 500; i++) {
    if (predicate(source.stats())) return
    await sleep(10)
  }
  throw new Error(`condition not reached: ${JSON.stringify(source.stats())}`)
}

module.exports = { eventually, eventuallyPasses, untilStats }
