'use strict'

/**
 * Which session stores this process uses and whether they answer, for the
 * worker's heartbeat and the primary's /ready probe.
 */

const entries = new Set()

/**
 * Track a store's availability.
 * @param {string} store 'redis' | 'cluster' | 'memory' | a Store class name
 * @param {() => { available: boolean, lastError: string|null }} probe
 * @returns {() => void} unregister
 */
function registerStatus (store, probe) {
  const entry = { store, probe }
  entries.add(entry)
  return function unregister () {
    entries.delete(entry)
  }
}

/**
 * The session store status of this process: `null` when no session()
 * middleware was created, else `{ store, available, lastError }`. With several
 * session() middlewares, the first unavailable one is reported.
 * @returns {{ store: string, available: boolean, lastError: string|null }|null}
 */
function sessionStatus () {
  let first = null
  for (const entry of entries) {
    const { available, lastError } = entry.probe()
    const status = { store: entry.store, available, lastError: lastError || null }
    if (!available) return status
    if (first === null) first = status
  }
  return first
}

module.exports = { registerStatus, sessionStatus }
