'use strict'

/**
 * Process-wide registry of live offload pools. Every pool registers itself on
 * creation and leaves on close, so the worker runtime can report queue depth in
 * its heartbeat and drain every pool during graceful shutdown without knowing
 * where the pools were created.
 */

/** @type {Set<{ queued: number, busy: number, close(o?: { timeoutMs?: number }): Promise<unknown> }>} */
const pools = new Set()

/**
 * Add a pool to the registry (idempotent).
 * @param {object} pool
 */
function register (pool) {
  pools.add(pool)
}

/**
 * Remove a pool from the registry (idempotent).
 * @param {object} pool
 */
function unregister (pool) {
  pools.delete(pool)
}

/**
 * Sum of queued (not yet dispatched) tasks over every live pool.
 * @returns {number}
 */
function queueDepth () {
  let n = 0
  for (const pool of pools) n += pool.queued
  return n
}

/**
 * Sum of threads currently running a task over every live pool.
 * @returns {number}
 */
function busyThreads () {
  let n = 0
  for (const pool of pools) n += pool.busy
  return n
}

/**
 * Close every live pool: each drains its running and queued tasks for up to
 * `timeoutMs`, then terminates its threads. Never rejects.
 * @param {{ timeoutMs?: number }} [options]
 * @returns {Promise<void>}
 */
function closeAll (options) {
  const closing = []
  for (const pool of pools) closing.push(pool.close(options).catch(noop))
  return Promise.all(closing).then(noop)
}

function noop () {}

module.exports = { register, unregister, queueDepth, busyThreads, closeAll }
