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
 */

const debug = require('debug')('clusterize:session')

/** The bus topic every cluster-store operation uses. */
const TOPIC = '$cz:session'
const DEFAULT_MAX_SESSIONS = 100000
const DEFAULT_SWEEP_INTERVAL_MS = 60000

/** One backend per bus: attaching twice (lead + single-process store) is harmless. */
const attached = new WeakMap()

class SessionBackend {
  /**
   * @param {object} [options]
   * @param {number} [options.maxSessions=100000] bound on live sessions
   * @param {number} [options.sweepIntervalMs=60000] how often expired sessions are removed (0 = never)
   * @param {() => number} [options.now] clock, for tests
   */
  constructor (options) {
    options = options || {}
    this.maxSessions = positiveInt(options.maxSessions, DEFAULT_MAX_SESSIONS, 'maxSessions')
    this.now = options.now || Date.now
    this.sessions = new Map()
    this.heapExp = []
    this.heapSid = []
    this.evicted = 0
    this.timer = null
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
      this.sessions.delete(sid)
      return null
    }
    return entry.sess
  }

  /**
   * Store a session. An expiry in the past deletes it (as connect-redis does).
   * @param {string} sid
   * @param {string} sess JSON
   * @param {number} expires ms since the epoch
   */
  set (sid, sess, expires) {
    if (!(expires > this.now())) {
      this.sessions.delete(sid)
      return
    }
    const entry = this.sessions.get(sid)
    if (entry !== undefined) {
      entry.sess = sess
      if (entry.expires !== expires) {
        entry.expires = expires
        this.push(expires, sid)
      }
      return
    }
    if (this.sessions.size >= this.maxSessions) this.makeRoom()
    this.sessions.set(sid, { sess, expires })
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
      this.sessions.delete(sid)
      return false
    }
    if (cookie !== undefined) entry.sess = withCookie(entry.sess, cookie, sid)
    if (entry.expires !== expires) {
      entry.expires = expires
      this.push(expires, sid)
    }
    return true
  }

  /** @param {string} sid */
  destroy (sid) {
    this.sessions.delete(sid)
  }

  /** @returns {Array<[string, string]>} [sid, JSON] of every live session */
  all () {
    this.sweep()
    const out = []
    for (const [sid, entry] of this.sessions) out.push([sid, entry.sess])
    return out
  }

  /** @returns {number} live sessions */
  length () {
    this.sweep()
    return this.sessions.size
  }

  clear () {
    this.sessions.clear()
    this.heapExp = []
    this.heapSid = []
  }

  /**
   * Remove every expired session.
   * @returns {number} how many were removed
   */
  sweep () {
    const now = this.now()
    let removed = 0
    while (this.heapExp.length > 0 && this.heapExp[0] <= now) {
      const [expires, sid] = this.pop()
      const entry = this.sessions.get(sid)
      if (entry !== undefined && entry.expires === expires) {
        this.sessions.delete(sid)
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
   * Answer one bus request.
   * @param {{ op: string, sid?: string, sess?: string, expires?: number, maxSessions?: number }} msg
   * @returns {*} a JSON-serialisable answer
   */
  dispatch (msg) {
    switch (msg && msg.op) {
      case 'get': return this.get(msg.sid)
      case 'set': this.set(msg.sid, msg.sess, msg.expires); return true
      case 'touch': return this.touch(msg.sid, msg.expires, msg.cookie)
      case 'destroy': this.destroy(msg.sid); return true
      case 'all': return this.all()
      case 'length': return this.length()
      case 'clear': this.clear(); return true
      case 'configure':
        if (msg.maxSessions !== undefined) this.maxSessions = positiveInt(msg.maxSessions, this.maxSessions, 'maxSessions')
        return true
      default: throw new Error(`cluster session store: unknown operation ${JSON.stringify(msg && msg.op)}`)
    }
  }

  /** Evict expired sessions, then the oldest-expiring until there is room for one more. */
  makeRoom () {
    this.sweep()
    while (this.sessions.size >= this.maxSessions && this.heapExp.length > 0) {
      const [expires, sid] = this.pop()
      const entry = this.sessions.get(sid)
      if (entry !== undefined && entry.expires === expires) {
        this.sessions.delete(sid)
        this.evicted++
        debug('maxSessions (%d) reached: evicted session expiring at %d', this.maxSessions, expires)
      }
    }
  }

  push (expires, sid) {
    const exp = this.heapExp
    const ids = this.heapSid
    if (exp.length > 2 * this.sessions.size + 1024) return this.rebuild()
    let i = exp.length
    exp.push(expires)
    ids.push(sid)
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (exp[parent] <= expires) break
      exp[i] = exp[parent]
      ids[i] = ids[parent]
      i = parent
    }
    exp[i] = expires
    ids[i] = sid
  }

  pop () {
    const exp = this.heapExp
    const ids = this.heapSid
    const top = [exp[0], ids[0]]
    const lastExp = exp.pop()
    const lastSid = ids.pop()
    if (exp.length > 0) this.siftDown(0, lastExp, lastSid)
    return top
  }

  siftDown (i, expires, sid) {
    const exp = this.heapExp
    const ids = this.heapSid
    const n = exp.length
    for (;;) {
      let child = 2 * i + 1
      if (child >= n) break
      if (child + 1 < n && exp[child + 1] < exp[child]) child++
      if (exp[child] >= expires) break
      exp[i] = exp[child]
      ids[i] = ids[child]
      i = child
    }
    exp[i] = expires
    ids[i] = sid
  }

  /** Rebuild the heap from the live entries, dropping stale ones. */
  rebuild () {
    const exp = []
    const ids = []
    for (const [sid, entry] of this.sessions) {
      exp.push(entry.expires)
      ids.push(sid)
    }
    this.heapExp = exp
    this.heapSid = ids
    for (let i = (exp.length >> 1) - 1; i >= 0; i--) this.siftDown(i, exp[i], ids[i])
  }
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

/**
 * Create the cluster session backend and answer `$cz:session` requests on
 * `bus`. Call it once in the primary at startup (and in the single process
 * when `workers: 0`). Idempotent per bus: a second call returns the same
 * backend (and applies a new `maxSessions`, if given).
 *
 * @param {{ handle: (topic: string, fn: Function) => any }} bus
 * @param {object} [options] see SessionBackend
 * @returns {SessionBackend}
 */
function attachSessionBackend (bus, options) {
  if (!bus || typeof bus.handle !== 'function') {
    throw new TypeError('attachSessionBackend(bus): bus must have a handle(topic, fn) method')
  }
  const existing = attached.get(bus)
  if (existing) {
    if (options && options.maxSessions !== undefined) existing.dispatch({ op: 'configure', maxSessions: options.maxSessions })
    return existing
  }
  const backend = new SessionBackend(options)
  bus.handle(TOPIC, function answerSessionRequest (data) {
    return backend.dispatch(data)
  })
  attached.set(bus, backend)
  debug('cluster session backend attached (maxSessions %d)', backend.maxSessions)
  return backend
}

/**
 * The backend attached to `bus`, if any.
 * @param {object} bus
 * @returns {SessionBackend|undefined}
 */
function backendFor (bus) {
  return attached.get(bus)
}

module.exports = { SessionBackend, attachSessionBackend, backendFor, TOPIC, DEFAULT_MAX_SESSIONS }
