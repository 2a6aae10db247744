'use strict'

/**
 * The worker's side of the cluster store's read leases (./leases.js): the
 * sessions this worker may read without asking the primary, each as the JSON
 * it last read or wrote, until its lease runs out by this process's clock
 * (counted from before the request that won it) or the primary revokes it.
 * One per process, shared by every ClusterStore in it: the primary grants
 * leases per process, so two stores with the same prefix must see the same
 * copies.
 */

const debug = require('debug')('clusterize:session')
const { performance } = require('perf_hooks')

const PRUNE_EVERY_MS = 5000

class LeaseCache {
  constructor () {
    /** @type {Map<string, { json: string, expires: number, grant: number, until: number }>} */
    this.entries = new Map()
    /**
     * Grants revoked before the reply that carried them was read: a revocation is
     * handled when it arrives, the callbacks of replies just before it later (they are
     * promise reactions), so it is remembered until those have run.
     */
    this.revokedGrants = new Set()
    this.forgetting = false
    /**
     * Writes (save, touch, destroy) this worker sent and the primary has not answered, by key,
     * and clear()s likewise: while one is out, no reply keeps a copy of that key (of any, for a
     * clear). A read's reply can be read after a write sent later was applied.
     */
    this.writes = new Map()
    this.clears = 0
    /** Saves answered under a lease (savingUnderLease) that the primary has not answered yet. */
    this.behind = 0
    /** @type {Array<Function>} settledBehind() callers, woken when `behind` is back to 0 */
    this.behindWaiters = []
    this.hits = 0
    this.timer = null
  }

  /**
   * The session's JSON, when this worker holds a live lease on it.
   * @param {string} key
   * @returns {string|undefined}
   */
  read (key) {
    const entry = this.liveEntry(key)
    if (entry === undefined) return undefined
    this.hits++
    return entry.json
  }

  /**
   * The entry of `key` while its lease and its session are live; an expired one is dropped.
   * @param {string} key
   */
  liveEntry (key) {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    if (entry.until > performance.now() && entry.expires > Date.now()) return entry
    this.entries.delete(key)
    return undefined
  }

  /**
   * A reply granted a lease on `key`, holding `json`.
   * @param {string} key
   * @param {string} json
   * @param {number} expires the session's expiry, ms since the epoch
   * @param {number} grant
   * @param {number} leaseMs
   * @param {number} askedAt performance.now() before the request was sent
   */
  keep (key, json, expires, grant, leaseMs, askedAt) {
    if (this.revokedGrants.has(grant) || this.writes.has(key) || this.clears > 0) return
    const current = this.entries.get(key)
    // Replies can be read out of order with respect to each other: the newer grant wins.
    if (current !== undefined && current.grant > grant) return
    this.entries.set(key, { json, expires, grant, until: askedAt + leaseMs })
    if (this.timer === null) {
      this.timer = setInterval(() => this.prune(), PRUNE_EVERY_MS)
      this.timer.unref()
    }
  }

  /** This worker is about to change `key` (save, touch, destroy): its copy is no longer current. */
  writing (key) {
    this.entries.delete(key)
    this.writes.set(key, (this.writes.get(key) || 0) + 1)
  }

  /**
   * This worker saves `key` while it holds a live lease on it: its copy becomes `json` at
   * once, so its own reads see the save, and no reply replaces that copy until the primary
   * has answered the save (savedUnderLease). The save may be answered before the primary
   * has applied it (./cluster-store.js says when); the primary revokes this lease before
   * any other worker reads or writes the session, and the answer to that revocation
   * travels behind the save on the same pipe.
   * @param {string} key
   * @param {string} json
   * @param {number} expires ms since the epoch
   * @returns {number} when the lease ends by this process's clock (performance.now()), 0 when
   *   no live lease is held (the save must wait for the primary)
   */
  savingUnderLease (key, json, expires) {
    const entry = this.liveEntry(key)
    if (entry === undefined) return 0
    entry.json = json
    entry.expires = expires
    this.writes.set(key, (this.writes.get(key) || 0) + 1)
    this.behind++
    return entry.until
  }

  /**
   * The primary answered (or the call failed) a save made with savingUnderLease().
   * @param {string} key
   * @param {boolean} applied false: the primary did not store it, so this copy is not what it holds
   */
  savedUnderLease (key, applied) {
    this.written(key)
    if (!applied) this.entries.delete(key)
    this.behind--
    if (this.behind === 0 && this.behindWaiters.length > 0) {
      const waiters = this.behindWaiters
      this.behindWaiters = []
      for (const wake of waiters) wake(true)
    }
  }

  /**
   * Resolves true once every save answered under a lease has been answered by the primary
   * too, false when `timeoutMs` passes first. A draining worker waits for it before it
   * exits, so the primary (and, during an upgrade, the next one) has applied them all.
   * @param {number} timeoutMs
   * @returns {Promise<boolean>}
   */
  settledBehind (timeoutMs) {
    if (this.behind === 0) return Promise.resolve(true)
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.behindWaiters = this.behindWaiters.filter((waiter) => waiter !== wake)
        resolve(false)
      }, timeoutMs)
      function wake (settled) {
        clearTimeout(timer)
        resolve(settled)
      }
      this.behindWaiters.push(wake)
    })
  }

  /** The primary answered (or the call failed) a write of `key` made after writing(key). */
  written (key) {
    const left = this.writes.get(key) - 1
    if (left > 0) this.writes.set(key, left)
    else this.writes.delete(key)
  }

  /** clear() is on its way: no copy is current. */
  clearing () {
    this.entries.clear()
    this.clears++
  }

  /** The primary answered (or the call failed) a clear() made after clearing(). */
  cleared () {
    this.clears--
  }

  /**
   * The primary revoked a lease: `[key, grant]`.
   * @param {*} revocation
   * @returns {number|null} the grant to acknowledge, null for a malformed push
   */
  revoke (revocation) {
    if (!Array.isArray(revocation) || typeof revocation[0] !== 'string' || typeof revocation[1] !== 'number') return null
    const [key, grant] = revocation
    const entry = this.entries.get(key)
    if (entry !== undefined && entry.grant <= grant) this.entries.delete(key)
    this.revokedGrants.add(grant)
    if (!this.forgetting) {
      this.forgetting = true
      setImmediate(() => {
        this.forgetting = false
        this.revokedGrants.clear()
      })
    }
    debug('lease %d revoked', grant)
    return grant
  }

  prune () {
    const now = performance.now()
    for (const [key, entry] of this.entries) if (!(entry.until > now)) this.entries.delete(key)
    if (this.entries.size === 0) {
      clearInterval(this.timer)
      this.timer = null
    }
  }
}

let shared = null
/** Service clients this process's cache already answers revocations through. */
const answered = new WeakSet()

/**
 * This process's lease cache. Given the session service's `client`, it also
 * answers the primary's revocations through that client, registered the first
 * time that client is seen, whichever call made the cache (the cache and the
 * pushes are per process).
 * @param {{ onPush: Function, notify: Function }} [client]
 * @returns {LeaseCache}
 */
function sharedLeaseCache (client) {
  if (shared === null) shared = new LeaseCache()
  if (client && !answered.has(client)) {
    answered.add(client)
    answerRevocations(shared, client)
  }
  return shared
}

/** First wait before acknowledging again when the channel was too full to take an acknowledgement. */
const ACK_RETRY_MS = 10
const ACK_RETRY_MAX_MS = 1000

function answerRevocations (leases, client) {
  /** Grants revoked here whose acknowledgement the channel refused (backpressure): sent again later. */
  let unsent = []
  let retryMs = 0
  let retryTimer = null
  let scheduled = false
  client.onPush(function onSessionPush (method, data) {
    if (method !== 'revoke') return
    const grant = leases.revoke(data)
    if (grant === null) return
    unsent.push(grant)
    // The revocations of one message (a batch) are answered together, once they are all handled;
    // every save answered under these leases was posted before this point.
    if (retryTimer === null && !scheduled) {
      scheduled = true
      queueMicrotask(acknowledge)
    }
  })
  // The primary lets the lease go only on this answer (or this process's exit), never on time:
  // an acknowledgement refused now is sent again until it goes. Sent later, it is still behind
  // every save this process answered under the lease (one channel, in order).
  function acknowledge () {
    retryTimer = null
    scheduled = false
    if (unsent.length === 0) return
    const grants = unsent
    unsent = []
    try {
      if (client.notify('revoked', grants) === false) return // no channel: the primary sees this process exit
      retryMs = 0
    } catch (err) {
      unsent = grants.concat(unsent)
      retryMs = Math.min(retryMs === 0 ? ACK_RETRY_MS : retryMs * 2, ACK_RETRY_MAX_MS)
      debug('leases %j: revocation not acknowledged yet (%s), again in %d ms', grants, err.message, retryMs)
      retryTimer = setTimeout(acknowledge, retryMs)
      retryTimer.unref()
    }
  }
}

/**
 * Wait (at most `timeoutMs`) until this process's saves answered under a lease are
 * answered by the primary too; at once when this process never took a lease.
 * @param {number} timeoutMs
 * @returns {Promise<boolean>} false when the time ran out first
 */
function savesUnderLeaseSettled (timeoutMs) {
  return shared === null ? Promise.resolve(true) : shared.settledBehind(timeoutMs)
}

module.exports = { LeaseCache, sharedLeaseCache, savesUnderLeaseSettled }
