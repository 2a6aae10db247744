'use strict'

/**
 * The cluster session store's data structure, held by the primary (or by the
 * only process in single-process mode) and reached by workers over the bus.
 *
 * Sessions are kept as the JSON strings the workers send: the primary only
 * parses one to replace its cookie on touch. Each entry carries its absolute expiry (ms since the
 * epoch), computed by the worker from the session cookie. A min-heap on the
 * expiry gives the periodic sweep and the `maxSessions` bound (the
 * oldest-expiring session is evicted first) O(log n) per operation; heap
 * entries made stale by later writes are skipped lazily and compacted away.
 * The same eviction keeps the total size (UTF-8 bytes of the JSON held) under
 * `maxTotalBytes`; a session bigger than that bound is refused, not stored.
 *
 * Every store in every worker reaches this one backend: stores are told apart
 * by their `prefix` (a namespace, '' by default), so clear(), length() and
 * all() act on one prefix only. The bounds are shared by all prefixes.
 */

const debug = require('debug')('clusterize:session')
const { ExpiryHeap } = require('./expiry-heap')
const { SESSION_OP, dispatchSessionOp, sidOf } = require('./cluster-ops')

/** The defaults of clusterize()'s clusterStore option, which sets these bounds in the primary. */
const { maxSessions: DEFAULT_MAX_SESSIONS, maxTotalBytes: DEFAULT_MAX_TOTAL_BYTES } = require('../config').DEFAULTS.clusterStore
const DEFAULT_SWEEP_INTERVAL_MS = 60000

class SessionBackend {
  /**
   * @param {object} [options]
   * @param {number} [options.maxSessions=100000] bound on live sessions
   * @param {number} [options.maxTotalBytes=134217728] bound on the bytes of session JSON held
   * @param {number} [options.sweepIntervalMs=60000] how often expired sessions are removed (0 = never)
   * @param {() => number} [options.now] clock, for tests
   */
  constructor (options) {
    options = options || {}
    this.maxSessions = positiveInt(options.maxSessions, DEFAULT_MAX_SESSIONS, 'maxSessions')
    this.maxTotalBytes = positiveInt(options.maxTotalBytes, DEFAULT_MAX_TOTAL_BYTES, 'maxTotalBytes')
    this.bytes = 0
    /** Live sessions per prefix, for length(prefix). */
    this.counts = new Map()
    this.now = options.now || Date.now
    this.sessions = new Map()
    this.heap = new ExpiryHeap()
    this.evicted = 0
    this.timer = null
    /** The workers' read leases on these sessions (./leases.js), when the primary grants them; told of evictions. */
    this.leases = null
    /** The primary's logger (the session service sets it): one line the first time the bounds evict. */
    this.log = null
    const every = options.sweepIntervalMs === undefined ? DEFAULT_SWEEP_INTERVAL_MS : options.sweepIntervalMs
    if (every > 0) {
      this.timer = setInterval(() => this.sweep(), every)
      this.timer.unref()
    }
  }

  /**
   * @param {string} sid
   * @returns {string|null} the session's JSON, or null when absent or expired
   */
  get (sid) {
    const entry = this.sessions.get(sid)
    if (entry === undefined) return null
    if (entry.expires <= this.now()) {
      this.remove(sid, entry)
      return null
    }
    return entry.sess
  }

  /**
   * @param {string} sid the key: see keyOf()
   * @returns {number} the live session's expiry (ms since the epoch), 0 when absent or expired
   */
  expiresOf (sid) {
    const entry = this.sessions.get(sid)
    return entry !== undefined && entry.expires > this.now() ? entry.expires : 0
  }

  /**
   * Store a session. An expiry in the past deletes it (as connect-redis does).
   * @param {string} sid the key: see keyOf()
   * @param {string} sess JSON
   * @param {number} expires ms since the epoch
   * @param {string} [prefix=''] the namespace the key is in
   */
  set (sid, sess, expires, prefix) {
    if (!(expires > this.now())) {
      this.destroy(sid)
      return
    }
    const size = Buffer.byteLength(sess)
    if (size > this.maxTotalBytes) {
      // Storing it would mean evicting every other session and still not fit.
      // 413 (status crosses to the worker): the session's size is the fault, not an outage.
      throw Object.assign(new RangeError(`cluster session store: a session of ${size} bytes cannot be stored: it is over the total bound of ${this.maxTotalBytes} bytes (session option maxTotalBytes) or clusterize() option clusterStore.maxTotalBytes`), { status: 413 })
    }
    const entry = this.sessions.get(sid)
    const growth = size - (entry === undefined ? 0 : entry.size)
    const full = (entry === undefined && this.sessions.size >= this.maxSessions) || this.bytes + growth > this.maxTotalBytes
    if (entry !== undefined && !full) {
      entry.sess = sess
      entry.size = size
      this.bytes += growth
      if (entry.expires !== expires) {
        entry.expires = expires
        this.push(expires, sid)
      }
      return
    }
    // Take the old version out while making room, so it is never counted twice
    // (and never evicted in favour of itself); it comes back as a new entry.
    if (entry !== undefined) this.remove(sid, entry)
    if (full) this.makeRoom(size)
    prefix = prefix || ''
    this.sessions.set(sid, { sess, expires, size, prefix })
    this.bytes += size
    this.counts.set(prefix, (this.counts.get(prefix) || 0) + 1)
    this.push(expires, sid)
  }

  /**
   * Extend a session's expiry and replace its stored cookie (so a later read
   * sees the new `cookie.expires`), keeping the rest of the session as stored.
   * @param {string} sid
   * @param {number} expires
   * @param {string} [cookie] the cookie's JSON
   * @returns {boolean} whether the session existed
   */
  touch (sid, expires, cookie) {
    const entry = this.sessions.get(sid)
    if (entry === undefined) return false
    // An expired session stays dead, even before the sweep removes it.
    if (entry.expires <= this.now() || !(expires > this.now())) {
      this.remove(sid, entry)
      return false
    }
    if (cookie !== undefined) {
      entry.sess = withCookie(entry.sess, cookie, sid)
      const size = Buffer.byteLength(entry.sess)
      this.bytes += size - entry.size
      entry.size = size
    }
    if (entry.expires !== expires) {
      entry.expires = expires
      this.push(expires, sid)
    }
    return true
  }

  /** @param {string} sid */
  destroy (sid) {
    const entry = this.sessions.get(sid)
    if (entry !== undefined) this.remove(sid, entry)
  }

  /** Drop one entry and its bytes (its heap entry goes stale and is skipped later). */
  remove (sid, entry) {
    this.sessions.delete(sid)
    this.bytes -= entry.size
    const left = this.counts.get(entry.prefix) - 1
    if (left > 0) this.counts.set(entry.prefix, left)
    else this.counts.delete(entry.prefix)
  }

  /**
   * What the backend holds, for the primary's stats().
   * @returns {{ sessions: number, bytes: number, maxSessions: number, maxTotalBytes: number, evicted: number, leases: object|null }}
   */
  stats () {
    return { sessions: this.sessions.size, bytes: this.bytes, maxSessions: this.maxSessions, maxTotalBytes: this.maxTotalBytes, evicted: this.evicted, leases: this.leases === null ? null : this.leases.stats() }
  }

  /**
   * @param {string} [prefix] only this namespace (omitted: every session, keys as stored)
   * @returns {Array<[string, string]>} [sid, JSON] of every live session
   */
  all (prefix) {
    this.sweep()
    const out = []
    for (const [key, entry] of this.sessions) {
      if (prefix === undefined) out.push([key, entry.sess])
      else if (entry.prefix === prefix) out.push([sidOf(prefix, key), entry.sess])
    }
    return out
  }

  /**
   * @param {string} [prefix] only this namespace (omitted: every session)
   * @returns {number} live sessions
   */
  length (prefix) {
    this.sweep()
    return prefix === undefined ? this.sessions.size : (this.counts.get(prefix) || 0)
  }

  /** @param {string} [prefix] only this namespace (omitted: every session) */
  clear (prefix) {
    const others = this.counts.size - (this.counts.has(prefix) ? 1 : 0)
    if (prefix !== undefined && others > 0) {
      for (const [key, entry] of this.sessions) {
        if (entry.prefix === prefix) this.remove(key, entry)
      }
      return
    }
    this.sessions.clear()
    this.counts.clear()
    this.bytes = 0
    this.heap = new ExpiryHeap()
  }

  /**
   * Remove every expired session.
   * @returns {number} how many were removed
   */
  sweep () {
    const now = this.now()
    let removed = 0
    while (this.heap.size > 0 && this.heap.peekExpires() <= now) {
      const [expires, sid] = this.heap.pop()
      const entry = this.sessions.get(sid)
      if (entry !== undefined && entry.expires === expires) {
        this.remove(sid, entry)
        removed++
      }
    }
    if (removed) debug('sweep removed %d expired sessions', removed)
    return removed
  }

  /** Stop the sweep timer and drop every session. */
  close () {
    if (this.timer) clearInterval(this.timer)
    this.timer = null
    this.clear()
  }

  /**
   * Answer one store request (./cluster-ops.js).
   * @param {{ op: string, prefix?: string, sid?: string, sess?: string, expires?: number, maxSessions?: number, maxTotalBytes?: number }} msg
   * @returns {*} a JSON-serialisable answer
   */
  dispatch (msg) {
    return dispatchSessionOp(this, msg)
  }

  /**
   * New bounds from a store (deprecated store options, see cluster-store.js); a bound left out stays.
   * @param {{ maxSessions?: number, maxTotalBytes?: number }} bounds
   */
  configure (bounds) {
    if (bounds.maxSessions !== undefined) this.maxSessions = positiveInt(bounds.maxSessions, this.maxSessions, 'maxSessions')
    if (bounds.maxTotalBytes !== undefined) this.maxTotalBytes = positiveInt(bounds.maxTotalBytes, this.maxTotalBytes, 'maxTotalBytes')
  }

  /**
   * Every live session, to hand to another primary (`clusterize upgrade`).
   * @returns {Array<[string, string, number, string]>} [key, JSON, expires, prefix]
   */
  snapshot () {
    const now = this.now()
    const out = []
    for (const [key, entry] of this.sessions) if (entry.expires > now) out.push([key, entry.sess, entry.expires, entry.prefix])
    return out
  }

  /**
   * Take sessions from snapshot(); the bounds apply as to any write.
   * @param {Array<[string, string, number, string]>} entries
   * @returns {number} how many were taken
   */
  restore (entries) {
    let taken = 0
    for (const entry of entries) {
      if (!Array.isArray(entry) || typeof entry[0] !== 'string' || typeof entry[1] !== 'string' || typeof entry[2] !== 'number') continue
      try {
        this.set(entry[0], entry[1], entry[2], typeof entry[3] === 'string' ? entry[3] : '')
        taken++
      } catch (err) {
        debug('session not restored: %s', err.message)
      }
    }
    return taken
  }

  /**
   * Evict expired sessions, then the oldest-expiring until one more session
   * of `size` bytes fits under both maxSessions and maxTotalBytes.
   * @param {number} size
   */
  makeRoom (size) {
    this.sweep()
    while ((this.sessions.size >= this.maxSessions || this.bytes + size > this.maxTotalBytes) && this.heap.size > 0) {
      const [expires, sid] = this.heap.pop()
      const entry = this.sessions.get(sid)
      if (entry !== undefined && entry.expires === expires) {
        this.remove(sid, entry)
        this.evicted++
        if (this.evicted === 1 && this.log !== null) {
          this.log.warn(`cluster session store: clusterStore.maxSessions (${this.maxSessions}) or clusterStore.maxTotalBytes (${this.maxTotalBytes}) reached: ` +
            'the sessions closest to expiry are evicted to make room (their users are logged out). Counted in /stats sessions.evicted and ' +
            'clusterize_primary_bound_reached_total{bound="sessions"}; this is logged once. Raise the bound, or use the Redis store.')
        }
        if (this.leases !== null) this.leases.evicted(sid)
        debug('maxSessions (%d) or maxTotalBytes (%d) reached: evicted session expiring at %d', this.maxSessions, this.maxTotalBytes, expires)
      }
    }
  }

  /** Push an expiry; rebuild the heap from live sessions once stale entries pile up. */
  push (expires, sid) {
    if (this.heap.size > 2 * this.sessions.size + 1024) this.heap.rebuild(liveExpiries(this.sessions))
    this.heap.push(expires, sid)
  }
}

/** [sid, expires] of every stored session. */
function * liveExpiries (sessions) {
  for (const [sid, entry] of sessions) yield [sid, entry.expires]
}

/**
 * The session JSON with its cookie replaced. The one place the primary parses
 * a session: touch must refresh the stored cookie in one round trip, atomically
 * with respect to concurrent saves. An unreadable record is left as it is.
 * @param {string} json
 * @param {string} cookie JSON
 * @param {string} sid
 * @returns {string}
 */
function withCookie (json, cookie, sid) {
  try {
    const sess = JSON.parse(json)
    if (sess === null || typeof sess !== 'object' || Array.isArray(sess)) return json
    sess.cookie = JSON.parse(cookie)
    return JSON.stringify(sess)
  } catch (err) {
    debug('touch %s: stored cookie not refreshed: %s', sid, err.message)
    return json
  }
}

function positiveInt (value, fallback, name) {
  if (value === undefined || value === null) return fallback
  if (!Number.isInteger(value) || value < 1) {
    throw new TypeError(`cluster session store: ${name} must be an integer >= 1, got ${value}`)
  }
  return value
}

module.exports = {
  SESSION_OP,
  SessionBackend,
  DEFAULT_MAX_SESSIONS,
  DEFAULT_MAX_TOTAL_BYTES
}
