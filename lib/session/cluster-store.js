'use strict'

/**
 * The cluster session store: an express-session Store whose sessions live in
 * the primary (lib/session/cluster-backend.js). Every operation is exactly one
 * request to the primary's session service (lib/services, ./cluster-service.js):
 * the session is JSON-encoded once, by this store; the message travels as
 * plain data (no second encoding) and the IPC channel frames it.
 * Sessions travel as JSON strings; expiry is computed here, from the cookie,
 * so the primary never parses a session. In a worker, reads of a session this
 * worker holds a lease on (./leases.js, ./lease-cache.js) are answered here,
 * from the JSON it last read or wrote, with no request; a save of such a
 * session is answered once the IPC write that carries it has completed (see
 * saveUnderLease), not after the primary's reply.
 */

const { Store } = require('express-session')
const debug = require('debug')('clusterize:session')
const { performance } = require('perf_hooks')
const { SESSION_OP, DEFAULT_MAX_TOTAL_BYTES } = require('./cluster-backend')
const { keyOf } = require('./cluster-ops')
const { SERVICE } = require('./cluster-service')
const { serviceClient, runtimeConfig } = require('../services')
const { sharedLeaseCache } = require('./lease-cache')
const { toUnavailable } = require('./unavailable')
const { sessionTooLarge, SessionTooLargeError } = require('./too-large')
const { callOnce, answer, CallbackOutcome } = require('./callback')
const { inflatableOrNull, whyNotInflatable, Unreadable } = require('./inflatable')
const { promised } = require('./promised')
const { sessionLog } = require('./log')

const DEFAULT_TIMEOUT_MS = 2000
const DEFAULT_TTL_SECONDS = 86400
/** Well under the bus's 1 MiB message limit, so a session that passes it also fits the bus. */
const DEFAULT_MAX_SESSION_BYTES = 512 * 1024

class ClusterStore extends Store {
  /**
   * @param {object} [options]
   * @param {number} [options.timeoutMs=2000] how long one operation may take before it fails (-> 503)
   * @param {string} [options.prefix=''] namespace in the primary: stores with different prefixes share
   *   nothing (clear/length/all included); stores with the same one (every worker's) share sessions
   * @param {number} [options.ttl=86400] seconds a session lives when its cookie has no expiry
   * @param {number} [options.maxSessions] deprecated: clusterize({ clusterStore: { maxSessions } }) sets the
   *   primary's bound at startup; given here, it is still sent to the primary once
   * @param {number} [options.maxTotalBytes] deprecated like maxSessions (clusterStore.maxTotalBytes); also
   *   checked here before sending
   * @param {number} [options.maxSessionBytes=524288] a bigger session is refused (413), checked here before sending
   * @param {(msg: object) => Promise<*>} [options.transport] internal: replaces the bus (tests)
   */
  constructor (options) {
    super()
    options = options || {}
    this.timeoutMs = options.timeoutMs || DEFAULT_TIMEOUT_MS
    this.ttlMs = (options.ttl || DEFAULT_TTL_SECONDS) * 1000
    this.prefix = options.prefix || ''
    this.available = true
    this.lastError = null
    this.maxSessionBytes = options.maxSessionBytes || DEFAULT_MAX_SESSION_BYTES
    this.maxTotalBytes = options.maxTotalBytes || DEFAULT_MAX_TOTAL_BYTES
    /** How this store's callbacks are running right now (lib/session/hold-response.js reads it). */
    this.outcome = new CallbackOutcome()
    const bounds = { maxSessions: options.maxSessions, maxTotalBytes: options.maxTotalBytes }
    const client = options.transport ? null : serviceClient(SERVICE, { timeoutMs: this.timeoutMs })
    this.transport = options.transport || serviceTransport(client)
    /** The service client, for read leases (none with a transport of the caller's). */
    this.client = client
    if (options.maxSessions !== undefined || options.maxTotalBytes !== undefined) {
      this.call(Object.assign({ op: SESSION_OP.CONFIGURE }, bounds), function configured (err) {
        if (err) debug('could not send maxSessions/maxTotalBytes to the primary: %s', err.message)
      })
    }
  }

  /**
   * @param {object} msg
   * @param {(err: Error|null, value?: *) => void} cb
   * @param {(err: Error|null) => void} [onWritten] over IPC, told once the request is written to the OS
   */
  call (msg, cb, onWritten) {
    if (this.prefix !== '') msg.prefix = this.prefix
    cb = callOnce(cb, msg.op, this.outcome)
    let pending
    try {
      pending = this.transport(msg, onWritten)
    } catch (err) {
      pending = Promise.reject(err)
    }
    pending.then((value) => {
      if (!this.available) {
        this.available = true
        debug('cluster store answering again')
      }
      cb(null, value)
    }, (err) => {
      // Over the bus message limit (maxSessionBytes raised past it): the session's fault, not an outage.
      if (err && err.code === 'ERR_CLUSTERIZE_BUS_TOO_LARGE') {
        return cb(sessionTooLarge(err.size, err.limit, 'bus.maxMessageBytes', 'clusterize() option'))
      }
      // Over the primary's total bound (clusterize() option clusterStore.maxTotalBytes): refused, not an outage.
      if (err && err.status === 413) return cb(new SessionTooLargeError(`session too large: ${err.message}`, { option: 'clusterStore.maxTotalBytes', cause: err }))
      const unavailable = toUnavailable(err, 'cluster')
      this.available = false
      this.lastError = unavailable.message
      debug('%s (op %s)', unavailable.message, msg.op)
      cb(unavailable)
    })
  }

  /** @returns {{ available: boolean, lastError: string|null }} */
  availability () {
    return { available: this.available, lastError: this.lastError }
  }

  get (sid, cb) {
    if (typeof cb !== 'function') return promised(this, 'get', [sid])
    const remove = (removed) => this.destroy(sid, removed)
    const leases = this.leases()
    if (leases === null) {
      this.call({ op: SESSION_OP.GET, sid }, function onGet (err, json) {
        if (err) return cb(err)
        cb(null, inflate(json, remove))
      })
      return
    }
    const key = keyOf(this.prefix, sid)
    const held = leases.read(key)
    if (held !== undefined) {
      process.nextTick(answerHeld, callOnce(cb, SESSION_OP.GET, this.outcome), held, remove)
      return
    }
    const askedAt = performance.now()
    this.call({ op: SESSION_OP.GET, sid, lease: 1 }, function onLeasedGet (err, reply) {
      if (err) return cb(err)
      // [json, expires, grant, leaseMs] when the primary granted a lease, else the JSON (or null).
      if (Array.isArray(reply)) {
        leases.keep(key, reply[0], reply[1], reply[2], reply[3], askedAt)
        return cb(null, inflate(reply[0], remove))
      }
      cb(null, inflate(reply, remove))
    })
  }

  set (sid, sess, cb) {
    if (typeof cb !== 'function') return promised(this, 'set', [sid, sess])
    let json
    try {
      json = JSON.stringify(sess)
    } catch (err) {
      return done(cb, err, this.outcome)
    }
    // Checked here, before it crosses the bus: the primary holds every session in memory.
    if (json.length * 3 > Math.min(this.maxSessionBytes, this.maxTotalBytes)) {
      const size = Buffer.byteLength(json)
      if (size > this.maxSessionBytes) return done(cb, sessionTooLarge(size, this.maxSessionBytes, 'maxSessionBytes'), this.outcome)
      if (size > this.maxTotalBytes) return done(cb, sessionTooLarge(size, this.maxTotalBytes, 'maxTotalBytes'), this.outcome)
    }
    // A save leaves this worker's own copy, when the primary grants a lease on it.
    this.callWriting({ op: SESSION_OP.SET, sid, sess: json, expires: this.expiresAt(sess) }, cb, true)
  }

  /** Extend the expiry and refresh the stored cookie (as MemoryStore does); the data stays as stored. */
  touch (sid, sess, cb) {
    if (typeof cb !== 'function') return promised(this, 'touch', [sid, sess])
    let cookie
    try {
      cookie = sess && sess.cookie ? JSON.stringify(sess.cookie) : undefined
    } catch (err) {
      return done(cb, err, this.outcome)
    }
    // The primary rewrites the stored cookie: a copy held here would keep the old one.
    this.callWriting({ op: SESSION_OP.TOUCH, sid, expires: this.expiresAt(sess), cookie }, cb)
  }

  destroy (sid, cb) {
    if (typeof cb !== 'function') return promised(this, 'destroy', [sid])
    this.callWriting({ op: SESSION_OP.DESTROY, sid }, cb)
  }

  /** Every live session, as an array of session objects with their `id` (like connect-redis). */
  all (cb) {
    if (typeof cb !== 'function') return promised(this, 'all', [])
    this.call({ op: SESSION_OP.ALL }, function onAll (err, pairs) {
      if (err) return cb(err)
      const out = []
      for (const [sid, json] of pairs || []) {
        try {
          const sess = JSON.parse(json)
          if (whyNotInflatable(sess) !== null) continue
          sess.id = sid
          out.push(sess)
        } catch {}
      }
      cb(null, out)
    })
  }

  length (cb) {
    if (typeof cb !== 'function') return promised(this, 'length', [])
    this.call({ op: SESSION_OP.LENGTH }, cb)
  }

  clear (cb) {
    if (typeof cb !== 'function') return promised(this, 'clear', [])
    const leases = this.leases()
    if (leases === null) return this.call({ op: SESSION_OP.CLEAR }, doneWith(cb, this.outcome))
    leases.clearing()
    const outcome = this.outcome
    this.call({ op: SESSION_OP.CLEAR }, function onLeasedClear (err) {
      leases.cleared()
      done(cb, err, outcome)
    })
  }

  /**
   * This worker's read leases, when it takes them: a worker talking to its
   * primary with clusterStore.leaseMs > 0 (in-process calls have no round trip to save).
   * @returns {import('./lease-cache').LeaseCache|null}
   */
  leases () {
    if (this.client === null || !this.client.remote()) return null
    const config = runtimeConfig().clusterStore
    if (!(config && config.leaseMs > 0)) return null
    return sharedLeaseCache(this.client)
  }

  /**
   * A save, touch or destroy of msg.sid: this worker's copy goes, and no reply restores it
   * until this one is answered.
   * @param {object} msg
   * @param {Function} cb
   * @param {boolean} [takesLease] a save: ask for a lease on what it leaves, and keep it
   */
  callWriting (msg, cb, takesLease) {
    const leases = this.leases()
    if (leases === null) return this.call(msg, doneWith(cb, this.outcome))
    const key = keyOf(this.prefix, msg.sid)
    if (takesLease && fitsPrimaryBound(msg.sess)) {
      const until = leases.savingUnderLease(key, msg.sess, msg.expires)
      if (until !== 0) return this.saveUnderLease(msg, key, until, leases, cb)
    }
    leases.writing(key)
    if (takesLease) msg.lease = 1
    const askedAt = performance.now()
    const outcome = this.outcome
    this.call(msg, function onLeasedWrite (err, reply) {
      leases.written(key)
      // [grant, leaseMs] when the primary granted a lease on what was just written.
      if (takesLease && !err && Array.isArray(reply)) leases.keep(key, msg.sess, msg.expires, reply[0], reply[1], askedAt)
      done(cb, err, outcome)
    })
  }

  /**
   * A save of a session this worker holds the lease on (its copy already holds the save:
   * LeaseCache#savingUnderLease). It is answered as soon as the IPC write carrying it has
   * completed, if the lease is still live then by this process's clock, without waiting for
   * the primary's reply:
   * - the OS holds the write, so the primary reads it even if this worker dies or hangs now;
   * - the primary reads one worker's messages in order, and revokes this lease before any
   *   other worker reads or writes the session; this worker's answer to the revocation
   *   travels behind the save, so the primary has applied the save before anyone else sees
   *   the session;
   * - the lease ends here before it ends in the primary, so a write completed before then is
   *   in the primary's pipe before a revocation left unanswered runs out.
   * A write completed after the lease ended, or one that failed, waits for the primary's
   * reply as every other write does. The primary cannot refuse such a save: its size was
   * checked against clusterStore.maxTotalBytes, and a store's deprecated maxTotalBytes option
   * lowers that bound only after every lease is revoked (./leases.js). Should a refusal come
   * anyway, it is logged as an error and the copy dropped.
   * @param {object} msg the SET request
   * @param {string} key
   * @param {number} until the lease's end by performance.now()
   * @param {import('./lease-cache').LeaseCache} leases
   * @param {Function} cb
   */
  saveUnderLease (msg, key, until, leases, cb) {
    msg.lease = 1
    const askedAt = performance.now()
    const answerOnce = callOnce(cb, SESSION_OP.SET, this.outcome)
    let answered = false
    this.call(msg, function onSavedUnderLease (err, reply) {
      leases.savedUnderLease(key, !err)
      // [grant, leaseMs]: the primary extended the lease over what was just saved.
      if (!err && Array.isArray(reply)) leases.keep(key, msg.sess, msg.expires, reply[0], reply[1], askedAt)
      if (!answered) {
        answered = true
        return answerOnce(err || null)
      }
      if (err) refusedAfterAnswer(err)
    }, function onWritten (err) {
      if (answered || err !== null || !(performance.now() < until)) return
      answered = true
      debug('save of a leased session answered once written')
      answerOnce(null)
    })
  }

  /**
   * Absolute expiry from the session cookie, or now + ttl for a browser-session cookie.
   * @param {object} sess
   * @returns {number}
   */
  expiresAt (sess) {
    const cookie = sess && sess.cookie
    if (cookie && cookie.expires) {
      const at = new Date(cookie.expires).getTime()
      if (!Number.isNaN(at)) return at
    }
    return Date.now() + this.ttlMs
  }
}

/**
 * Whether the primary's bound (clusterize() option clusterStore.maxTotalBytes) can take
 * this session: a save answered before the primary's reply must be one it cannot refuse.
 * @param {string} json
 * @returns {boolean}
 */
function fitsPrimaryBound (json) {
  const config = runtimeConfig().clusterStore
  const bound = config && config.maxTotalBytes
  if (!(bound > 0)) return false
  return json.length * 3 <= bound || Buffer.byteLength(json) <= bound
}

/** The primary failed a save this worker had already answered (see saveUnderLease). */
function refusedAfterAnswer (err) {
  if (err instanceof SessionTooLargeError) {
    sessionLog().error(`cluster session store: a save of a leased session was answered, then refused by the primary (${err.message}); the primary keeps the session's previous data. Please report this: it should not happen.`)
    return
  }
  // Timed out or the channel closed: the save was written to the OS, the primary reads it when it can.
  debug('save of leased session answered before the primary failed it: %s', err && err.message)
}

/** The session in `json` (null when there is none), as every read answers it. */
function inflate (json, remove) {
  if (json === null || json === undefined) return null
  let sess
  try {
    sess = JSON.parse(json)
  } catch (parseError) {
    sess = new Unreadable(parseError.message)
  }
  return inflatableOrNull(sess, 'cluster', remove)
}

function answerHeld (cb, json, remove) {
  cb(null, inflate(json, remove))
}

function doneWith (cb, outcome) {
  return function finished (err) {
    done(cb, err, outcome)
  }
}

function done (cb, err, outcome) {
  answer(cb, err || null, undefined, outcome)
}

/**
 * The default transport: one request to the primary's session service (in a
 * worker over IPC; in the primary, with `workers: 0` or outside clusterize,
 * in this process). Requests of one loop turn share one IPC write.
 */
function serviceTransport (client) {
  return function toSessionService (msg, onWritten) {
    // Sized for backpressure without encoding it: the session string is nearly all of it.
    return client.request(msg.op, msg, { bytes: typeof msg.sess === 'string' ? msg.sess.length : 0, onWritten })
  }
}

module.exports = { ClusterStore, DEFAULT_TIMEOUT_MS, DEFAULT_MAX_SESSION_BYTES }
