'use strict'

/**
 * A primary's singleton lease table across `clusterize upgrade` without
 * Redis (lib/primary/handover.js): the new primary learns who holds each
 * name, so its own workers wait until the old holder released the name or
 * exited (both reach the new primary through the pass-through). Never two
 * holders. With Redis the lease lives there and nothing is handed over.
 */

const debug = require('debug')('clusterize:singleton')

/**
 * Old primary: the holders, to hand over. Its pending asks are answered
 * "not granted" so the workers ask again, now of the new primary; the holders
 * stay here too (if the upgrade fails, a holder keeps its name until it
 * releases it or exits: at worst the job pauses, it never runs twice).
 * @param {import('./leases').LeaseTable} table
 * @returns {Array<[string, number, number, number, boolean, number]>} [name, owner, token, since, revoked, leaseMs]
 */
function exportLeases (table) {
  const items = []
  for (const [name, entry] of Array.from(table.names)) {
    for (const waiter of entry.waiters.splice(0)) {
      clearTimeout(waiter.timer)
      waiter.resolve({ granted: false })
    }
    clearTimeout(entry.retryTimer)
    entry.retryTimer = null
    const holder = entry.holder
    if (holder !== null) items.push([name, holder.owner, holder.token, holder.since, holder.revoked, entry.leaseMs])
    else if (!entry.claiming) table.names.delete(name)
  }
  return items
}

/**
 * New primary: the old primary's holders hold here from now on.
 * @param {import('./leases').LeaseTable} table
 * @param {Array<*>} items as exportLeases() gives them
 */
function importLeases (table, items) {
  for (const item of items) {
    if (!Array.isArray(item) || typeof item[0] !== 'string' || !Number.isInteger(item[1]) || !Number.isSafeInteger(item[2])) continue
    const [name, owner, token, since, revoked, leaseMs] = item
    const entry = table.entry(name)
    if (typeof table.backend.advance === 'function') table.backend.advance(token)
    if (entry.holder !== null) {
      // Cannot happen while the handover holds this primary's calls; never replace a holder.
      debug('%s: held here by %d already, the handed-over holder %d is not taken', name, entry.holder.owner, owner)
      continue
    }
    if (Number.isInteger(leaseMs) && leaseMs > 0) entry.leaseMs = leaseMs
    entry.holder = { owner, token, since: Number.isFinite(since) ? since : table.now(), revoked: revoked === true, watch: null }
    debug('%s: held by %d (token %d), handed over', name, owner, token)
  }
}

module.exports = { exportLeases, importLeases }
