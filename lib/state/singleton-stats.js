'use strict'

/**
 * The singletons section of stats() (and /stats): which names this host
 * holds or waits for, the worker that runs each (its slot and pid), the
 * holder's fencing token, since when, and where the lease lives. Read from
 * the singleton service's lease table; workers are named by the slot the
 * supervisor gave them, which is what the rest of /stats uses.
 */

/**
 * @param {{ list: () => object[] }|undefined} api the singleton service's api (undefined: not started here)
 * @param {Array<{ id: number, pid: number }>} workers the live workers
 * @param {number} [now]
 * @returns {Array<{ name: string, state: 'held'|'stopping'|'held-elsewhere'|'waiting', worker: { slot: number|null, pid: number }|null, token: number|null, since: string|null, heldMs: number|null, lease: 'local'|'redis', waiting: number }>}
 */
function singletonStats (api, workers, now) {
  if (!api || typeof api.list !== 'function') return []
  now = now === undefined ? Date.now() : now
  const slotOf = new Map(workers.map((worker) => [worker.pid, worker.id]))
  return api.list().map(function singletonEntry (entry) {
    const held = entry.owner !== null
    return {
      name: entry.name,
      state: stateOf(entry),
      worker: held ? { slot: slotOf.has(entry.owner) ? slotOf.get(entry.owner) : null, pid: entry.owner } : null,
      token: entry.token,
      since: held && entry.since ? new Date(entry.since).toISOString() : null,
      heldMs: held && entry.since ? now - entry.since : null,
      lease: entry.lease,
      waiting: entry.waiting
    }
  })
}

/** 'stopping': its lease was lost and the holder has not released yet; no other worker runs it meanwhile. */
function stateOf (entry) {
  if (entry.owner !== null) return entry.revoked ? 'stopping' : 'held'
  return entry.elsewhere ? 'held-elsewhere' : 'waiting'
}

module.exports = { singletonStats }
