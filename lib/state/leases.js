'use strict'

/**
 * The primary's side of singleton(): who runs each named job now. One
 * holder per name at a time, chosen among the workers that ask; the next
 * one only after the holder released it or its process exited, so two
 * holders never overlap. Each new holder gets a fencing token that grows.
 *
 * Workers reach this table with long polls (the service layer has
 * request/response only):
 *   acquire(name, owner, waitMs) resolves when the owner gets the lease, or
 *     with `{ granted: false }` after waitMs (the worker asks again);
 *   watch(name, owner, token, waitMs) resolves `{ held: false }` when the
 *     lease is revoked (the fleet lease was lost), else `{ held: true }`
 *     after waitMs.
 * Asking again is idempotent: a holder that asks gets its own token back
 * (its earlier answer may have been lost to a timeout).
 *
 * Which host may hand a name out is the backend's call: `claim(name,
 * leaseMs)` resolves the next token, or null while another host holds the
 * name (with Redis: ./lease-redis.js); `keep`/`drop` hold and let go of the
 * fleet lease. On one host (./lease-local.js) every claim succeeds.
 */

const debug = require('debug')('clusterize:singleton')

/** While another host holds a name, the waiters' host asks again at this fraction of the lease. */
const RETRY_FRACTION = 0.25

class LeaseTable {
  /**
   * @param {{ claim: (name: string, leaseMs: number) => Promise<number|null>, keep: (name: string, leaseMs: number, onLost: () => void) => void, drop: (name: string) => void }} backend
   * @param {{ log?: object }} [options]
   */
  constructor (backend, options) {
    this.backend = backend
    this.log = (options && options.log) || null
    this.now = (options && options.now) || Date.now
    /** name -> { holder, waiters: Array, claiming, retryTimer, leaseMs } */
    this.names = new Map()
  }

  entry (name) {
    let entry = this.names.get(name)
    if (entry === undefined) {
      entry = { holder: null, waiters: [], claiming: false, retryTimer: null, leaseMs: 0, elsewhere: false }
      this.names.set(name, entry)
    }
    return entry
  }

  /**
   * @param {string} name
   * @param {number} owner the asking worker's pid
   * @param {{ waitMs: number, leaseMs: number }} timing
   * @returns {Promise<{ granted: true, token: number } | { granted: false }>}
   */
  acquire (name, owner, timing) {
    const entry = this.entry(name)
    if (entry.leaseMs === 0) entry.leaseMs = timing.leaseMs
    if (entry.holder !== null && entry.holder.owner === owner) {
      return Promise.resolve(entry.holder.revoked ? { granted: false } : { granted: true, token: entry.holder.token })
    }
    // One pending ask per owner: a repeated ask replaces the older one.
    this.removeWaiter(entry, owner, { granted: false })
    return new Promise((resolve) => {
      const waiter = { owner, resolve, timer: null }
      waiter.timer = setTimeout(() => {
        this.removeWaiter(entry, owner, { granted: false })
        this.settle(name, entry)
      }, timing.waitMs)
      waiter.timer.unref()
      entry.waiters.push(waiter)
      this.grantNext(name, entry)
    })
  }

  /**
   * Resolve when the lease is taken away from `owner`, or after waitMs.
   * @returns {Promise<{ held: boolean }>}
   */
  watch (name, owner, token, waitMs) {
    const entry = this.names.get(name)
    const holder = entry && entry.holder
    if (!holder || holder.owner !== owner || holder.token !== token || holder.revoked) return Promise.resolve({ held: false })
    if (holder.watch) holder.watch.resolve({ held: true })
    return new Promise((resolve) => {
      const watch = { resolve, timer: null }
      watch.timer = setTimeout(() => {
        if (holder.watch === watch) holder.watch = null
        resolve({ held: !holder.revoked })
      }, waitMs)
      watch.timer.unref()
      holder.watch = watch
    })
  }

  /**
   * Does `owner` still hold `name` with `token`, and for how long at least (ms from now)?
   * Answered at once: the holder's worker asks every few moments and aborts its job by itself
   * when no answer comes in time (lib/state/singleton.js). `validMs` null: no bound (one host,
   * where only this primary hands the name out).
   * @returns {{ held: boolean, validMs: number|null }}
   */
  confirm (name, owner, token) {
    const entry = this.names.get(name)
    const holder = entry && entry.holder
    if (!holder || holder.owner !== owner || holder.token !== token || holder.revoked) return { held: false, validMs: 0 }
    const validMs = typeof this.backend.validFor === 'function' ? this.backend.validFor(name) : null
    if (validMs === 0) return { held: false, validMs: 0 }
    return { held: true, validMs }
  }

  /**
   * The holder is done (its job stopped, its worker drained). Ignored from anyone else.
   * @returns {boolean} whether it was the holder
   */
  release (name, owner, token) {
    const entry = this.names.get(name)
    if (!entry || !entry.holder || entry.holder.owner !== owner || entry.holder.token !== token) return false
    debug('%s released by %d (token %d)', name, owner, token)
    this.clearHolder(entry)
    this.settle(name, entry)
    return true
  }

  /**
   * A worker process exited: what it held is free, its asks are void.
   * @param {number} owner pid
   */
  ownerGone (owner) {
    for (const [name, entry] of this.names) {
      this.removeWaiter(entry, owner, { granted: false })
      if (entry.holder !== null && entry.holder.owner === owner) {
        debug('%s: holder %d exited', name, owner)
        this.clearHolder(entry)
      }
      this.settle(name, entry)
    }
  }

  /**
   * The fleet lease of `name` is lost: the holder is told (its watch
   * answers held: false, its signal aborts) and keeps the name on this host
   * until it released or exited; then this host claims again.
   */
  revoke (name) {
    const entry = this.names.get(name)
    if (!entry || !entry.holder || entry.holder.revoked) return
    if (this.log) this.log.warn(`singleton "${name}": the lease was lost (Redis unreachable or taken over): its job is being stopped on this host`, { pid: entry.holder.owner })
    entry.holder.revoked = true
    if (entry.holder.watch) {
      clearTimeout(entry.holder.watch.timer)
      entry.holder.watch.resolve({ held: false })
      entry.holder.watch = null
    }
  }

  /**
   * For /stats: each name this host holds or wants. `lease` says where the
   * lease lives: 'local' (this primary decides) or 'redis' (claimed in Redis
   * for the fleet); `elsewhere`: the last claim found it held by another host.
   * @returns {Array<{ name: string, owner: number|null, token: number|null, since: number|null, revoked: boolean, elsewhere: boolean, waiting: number, lease: string }>}
   */
  list () {
    const lease = this.backend.kind || 'local'
    return Array.from(this.names, ([name, entry]) => ({
      name,
      owner: entry.holder ? entry.holder.owner : null,
      token: entry.holder ? entry.holder.token : null,
      since: entry.holder ? entry.holder.since : null,
      revoked: entry.holder ? entry.holder.revoked : false,
      elsewhere: entry.holder === null && entry.elsewhere,
      waiting: entry.waiters.length,
      lease
    }))
  }

  /** Shutdown: answer every pending ask, stop the retries, let go of the fleet leases. */
  close () {
    for (const [name, entry] of this.names) {
      for (const waiter of entry.waiters.splice(0)) {
        clearTimeout(waiter.timer)
        waiter.resolve({ granted: false })
      }
      clearTimeout(entry.retryTimer)
      if (entry.holder) this.revoke(name)
      this.backend.drop(name)
    }
    this.names.clear()
  }

  clearHolder (entry) {
    const holder = entry.holder
    entry.holder = null
    if (holder.watch) {
      clearTimeout(holder.watch.timer)
      holder.watch.resolve({ held: false })
    }
  }

  removeWaiter (entry, owner, answer) {
    const index = entry.waiters.findIndex((w) => w.owner === owner)
    if (index === -1) return
    const [waiter] = entry.waiters.splice(index, 1)
    clearTimeout(waiter.timer)
    waiter.resolve(answer)
  }

  /** After a change: give the name to the next waiter, or let the fleet lease go when nobody wants it. */
  settle (name, entry) {
    if (entry.holder !== null) return
    if (entry.waiters.length > 0) return this.grantNext(name, entry)
    if (!entry.claiming) {
      clearTimeout(entry.retryTimer)
      entry.retryTimer = null
      this.backend.drop(name)
      this.names.delete(name)
    }
  }

  /** Claim the name (a new token) and hand it to the first waiter. */
  grantNext (name, entry) {
    if (entry.holder !== null || entry.claiming || entry.retryTimer !== null || entry.waiters.length === 0) return
    entry.claiming = true
    // undefined: the claim failed (Redis unreachable); null: another host holds the name.
    Promise.resolve().then(() => this.backend.claim(name, entry.leaseMs)).then((token) => token, (err) => {
      debug('%s: claim failed: %s', name, err && err.message)
      return undefined
    }).then((token) => {
      entry.claiming = false
      if (this.names.get(name) !== entry) {
        if (token !== null && token !== undefined) this.backend.drop(name)
        return
      }
      entry.elsewhere = token === null
      if (token === null || token === undefined) return this.retryLater(name, entry)
      const waiter = entry.waiters.shift()
      if (waiter === undefined) return this.settle(name, entry)
      clearTimeout(waiter.timer)
      entry.holder = { owner: waiter.owner, token, since: this.now(), revoked: false, watch: null }
      debug('%s granted to %d (token %d)', name, waiter.owner, token)
      this.backend.keep(name, entry.leaseMs, () => this.revoke(name))
      waiter.resolve({ granted: true, token })
    })
  }

  retryLater (name, entry) {
    if (entry.waiters.length === 0) return this.settle(name, entry)
    entry.retryTimer = setTimeout(() => {
      entry.retryTimer = null
      this.grantNext(name, entry)
    }, Math.max(50, Math.round(entry.leaseMs * RETRY_FRACTION)))
    entry.retryTimer.unref()
  }
}

module.exports = { LeaseTable, RETRY_FRACTION }
