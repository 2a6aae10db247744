'use strict'

/**
 * Read leases of the cluster store, held by the primary beside its
 * SessionBackend (./cluster-backend.js).
 *
 * A lease lets one worker answer reads of one session from the copy it last
 * read or wrote, for `leaseMs`, without asking the primary, and answer its
 * saves of it once they are written to the primary's pipe, without waiting
 * for the reply: a kept-alive connection's requests then wait for no IPC
 * round trip at all. Reads and writes stay linearizable:
 * - one worker holds a session's lease at a time, and every write goes
 *   through the primary, in the order the holder sent them;
 * - before another worker's read or write of the session is answered (or a
 *   destroy, touch, clear or all()), the holder is told to drop its copy (a
 *   push), and the other worker's request waits for its answer, or for its
 *   exit once its last messages are read. The answer travels behind the
 *   holder's saves on the same pipe, so they are applied first; the holder's
 *   own requests go ahead meanwhile.
 * - Never on time alone: a lease that ran out by this process's clock still
 *   waits for that answer. The holder's clock bounds when it *answered* a save,
 *   not when this process *reads* it: after a stall of this process (a long GC,
 *   a CPU quota, an app's bus handler that blocks) such a save can still be
 *   unread in the holder's pipe while another worker's request is read first.
 *   A hung holder therefore delays the session's other readers until it
 *   answers or the hang detector kills it (health.heartbeatTimeoutMs).
 * A lease is granted only to the worker that made the session's previous
 * access too, and a session whose live lease had to be revoked gets none for
 * a while (1 s, doubling with each revocation up to a minute, back to 1 s
 * after a minute without one): sessions whose requests spread over workers (a
 * browser's several connections under round robin) soon stop holding leases,
 * so their writes stop waiting for revocations, and cost what they cost
 * without. Leases that ran out on sessions nobody used since are revoked in
 * the background (prune), so their records can go.
 */

const debug = require('debug')('clusterize:session')
const { performance } = require('perf_hooks')
const { SESSION_OP, keyOf } = require('./cluster-ops')

/** How long an unleased record of a session's last reader is kept (affinity is forgotten after). */
const FORGET_AFTER_MS = 10000
/** No lease for this long after a session's first revocation; doubled with each one after. */
const FIRST_BACKOFF_MS = 1000
const MAX_BACKOFF_MS = 60000
/** Exited workers remembered (they get no grant): a pid reused later only loses its leases. */
const MAX_EXITED_REMEMBERED = 4096
/** Leases that ran out revoked per prune at most: a primary with many idle sessions sends no burst. */
const MAX_RELEASED_PER_PRUNE = 10000

class SessionLeases {
  /**
   * @param {object} options
   * @param {number} options.leaseMs how long a lease lasts (> 0)
   * @param {(pid: number, method: string, data: *) => boolean} options.push tell a worker (false: it is
   *   gone; its leases end when forget(pid) is called, once its last messages are read)
   * @param {() => number} [options.now] a monotonic clock in ms, for tests
   */
  constructor (options) {
    this.leaseMs = options.leaseMs
    this.push = options.push
    this.now = options.now || performance.now.bind(performance)
    /** @type {Map<string, LeaseRecord>} */
    this.records = new Map()
    /** Revocations waiting for their holder, by grant. */
    this.waiting = new Map()
    /** Pids forget() was called for: no grant goes to them. */
    this.exited = new Set()
    this.seq = 0
    /** A clear() is revoking every lease: no grant until it is applied. */
    this.clearing = 0
    this.granted = 0
    this.revoked = 0
    this.released = 0
    this.timer = setInterval(() => this.prune(), Math.max(FORGET_AFTER_MS, this.leaseMs * 2))
    this.timer.unref()
  }

  /**
   * `pid` read or wrote `key` and found (or left) the session there: the lease granted, 0 for none.
   * Called only while answering a message of `pid` as it is read (never after a wait), so `pid`
   * has not been forgotten yet unless it is a pid reused after an exit.
   * @param {string} key
   * @param {number} pid
   * @returns {number}
   */
  grant (key, pid) {
    const now = this.now()
    const record = this.records.get(key)
    if (record === undefined) {
      this.records.set(key, new LeaseRecord(pid, now))
      return 0
    }
    const again = record.last === pid
    record.last = pid
    record.at = now
    if (record.revoking !== null || this.clearing > 0 || record.quietUntil > now || this.exited.has(pid)) return 0
    // beforeAccess() left the lease with `pid` or with nobody.
    if (record.holder !== 0 && record.holder !== pid) return 0
    if (record.holder !== pid && !again) return 0
    record.holder = pid
    record.until = now + this.leaseMs
    record.grant = ++this.seq
    this.granted++
    return record.grant
  }

  /**
   * Before `pid` reads or writes `key`: null when it may go ahead now, else a
   * Promise that settles once another worker's lease on it is gone (ask again
   * then). The holder goes ahead even while its lease is being revoked: what
   * it sends is ordered before its answer to the revocation. A lease that ran
   * out is revoked too: its holder may have answered saves still unread in its pipe.
   * @param {string} key
   * @param {number} pid
   * @returns {Promise<void>|null}
   */
  beforeAccess (key, pid) {
    const record = this.records.get(key)
    if (record === undefined) return null
    if (record.holder === pid) return null
    if (record.revoking !== null) return record.revoking
    if (record.holder === 0) return null
    return this.revoke(key, record)
  }

  /**
   * `pid` touched `key`: the primary rewrote its cookie, so no copy of it is
   * current, the toucher's included (it dropped its own when it asked, and its
   * saves under the lease were sent, so read, before the touch).
   * @param {string} key
   */
  touched (key) {
    const record = this.records.get(key)
    if (record !== undefined && record.revoking === null) record.holder = 0
  }

  /** `key` was destroyed (after beforeAccess): forget it. */
  destroyed (key) {
    const record = this.records.get(key)
    if (record !== undefined && record.revoking === null) this.records.delete(key)
  }

  /**
   * The backend evicted `key` to make room: its holder drops its copy. The write
   * that made room (another session's) does not wait, but the next access of
   * `key` does, so a save the holder answered is read before anyone sees the session gone.
   * @param {string} key
   */
  evicted (key) {
    const record = this.records.get(key)
    if (record === undefined || record.revoking !== null) return
    if (record.holder === 0) this.records.delete(key)
    else this.revoke(key, record, true)
  }

  /**
   * Before `pid` clears sessions: null when no other worker holds a lease,
   * else a Promise that settles once they are all revoked (ask again then).
   * No lease is granted until cleared() is called.
   * @param {number} pid
   * @returns {Promise<void>|null}
   */
  beforeClear (pid) {
    const revoking = this.revokeOthers(pid)
    if (revoking.length === 0) return null
    this.clearing++
    const settled = () => { this.clearing-- }
    return Promise.all(revoking).then(settled, settled)
  }

  /**
   * Before `pid` reads every session (all()): null when no other worker holds a
   * lease, else a Promise that settles once they are all revoked, so that the
   * saves their holders answered are applied.
   * @param {number} pid
   * @returns {Promise<void>|null}
   */
  beforeReadAll (pid) {
    const revoking = this.revokeOthers(pid)
    if (revoking.length === 0) return null
    return Promise.all(revoking).then(noop, noop)
  }

  /**
   * Revoke every lease and grant none until resume(): a primary upgrade hands the
   * sessions over once this settles (lib/primary/handover.js prepareServices), so
   * every save a holder answered is in the snapshot, before the new primary serves.
   * A hung holder holds this up until it answers or exits.
   * @returns {Promise<void>}
   */
  suspend () {
    this.clearing++
    return Promise.all(this.revokeOthers(0)).then(noop, noop)
  }

  /** Grant leases again (the upgrade that suspended them failed). */
  resume () {
    if (this.clearing > 0) this.clearing--
  }

  /** Revoke every lease not held by `pid`, run out or not: the revocations (and those already under way). */
  revokeOthers (pid) {
    const revoking = []
    for (const [key, record] of this.records) {
      if (record.revoking !== null) {
        if (record.holder !== pid) revoking.push(record.revoking)
      } else if (record.holder !== 0 && record.holder !== pid) {
        revoking.push(this.revoke(key, record))
      }
    }
    return revoking
  }

  /** The clear was applied: every record goes (a lease of the clearer was dropped in the clearer). */
  cleared () {
    for (const [key, record] of this.records) if (record.revoking === null) this.records.delete(key)
  }

  /**
   * A worker answered revocations.
   * @param {number} pid
   * @param {Array<number>} grants
   */
  acknowledged (pid, grants) {
    if (!Array.isArray(grants)) return
    for (const grant of grants) {
      const waiting = this.waiting.get(grant)
      if (waiting !== undefined && waiting.holder === pid) waiting.settle()
    }
  }

  /**
   * A worker exited and its last messages were read (lib/services/host.js): its
   * leases end, and requests waiting on them go ahead.
   * @param {number} pid
   */
  forget (pid) {
    this.exited.add(pid)
    if (this.exited.size > MAX_EXITED_REMEMBERED) this.exited.delete(this.exited.values().next().value)
    for (const waiting of this.waiting.values()) if (waiting.holder === pid) waiting.settle()
    for (const record of this.records.values()) {
      if (record.holder === pid && record.revoking === null) record.holder = 0
      if (record.last === pid) record.last = 0
    }
  }

  /**
   * @returns {{ leaseMs: number, granted: number, revoked: number, released: number, revoking: number }}
   *   `revoking`: revocations waiting for their holder now (a hung holder keeps one waiting)
   */
  stats () {
    return { leaseMs: this.leaseMs, granted: this.granted, revoked: this.revoked, released: this.released, revoking: this.waiting.size }
  }

  /**
   * Drop records of sessions nobody has used for a while and that hold no lease;
   * a lease that ran out on such a session is revoked first (its record goes at a later prune).
   */
  prune () {
    const now = this.now()
    let released = 0
    for (const [key, record] of this.records) {
      if (record.revoking !== null || now - record.at <= FORGET_AFTER_MS || record.quietUntil > now) continue
      if (record.holder === 0) this.records.delete(key)
      else if (!(record.until > now) && released < MAX_RELEASED_PER_PRUNE) {
        released++
        this.released++
        this.revoke(key, record, true)
      }
    }
  }

  close () {
    clearInterval(this.timer)
    for (const waiting of this.waiting.values()) waiting.settle()
    this.records.clear()
  }

  /**
   * Tell the holder to drop its copy; settles on its answer or on its exit once its
   * last messages are read (forget), never on time.
   * @param {string} key
   * @param {LeaseRecord} record
   * @param {boolean} [quiet] not for another worker's access (eviction, prune): no back-off
   * @returns {Promise<void>}
   */
  revoke (key, record, quiet) {
    const holder = record.holder
    const grant = record.grant
    const leases = this
    const now = this.now()
    if (!quiet && record.until > now) {
      // Contended: back off, longer each time, unless the last revocation was long ago.
      record.backoff = record.backoff === 0 || now - record.quietUntil > MAX_BACKOFF_MS ? FIRST_BACKOFF_MS : Math.min(record.backoff * 2, MAX_BACKOFF_MS)
      record.quietUntil = now + record.backoff
    }
    let resolve
    const waiting = {
      holder,
      settle () {
        if (leases.waiting.get(grant) !== waiting) return
        leases.waiting.delete(grant)
        record.revoking = null
        if (record.grant === grant) record.holder = 0
        resolve()
      }
    }
    record.revoking = new Promise(function revoking (settled) { resolve = settled })
    this.waiting.set(grant, waiting)
    if (!quiet) this.revoked++
    const revoking = record.revoking
    if (!this.push(holder, 'revoke', [key, grant])) {
      // Gone from the host: its exit is being handled, and forget() comes once its last
      // messages are read. Already forgotten (no grant reaches such a pid): nothing is in flight.
      if (this.exited.has(holder)) waiting.settle()
      else debug('lease %d of worker %d: the worker is gone; waiting until its last messages are read', grant, holder)
    }
    return revoking
  }
}

class LeaseRecord {
  constructor (pid, now) {
    /** The pid of the session's last reader or writer (0: none known). */
    this.last = pid
    this.at = now
    /**
     * The pid holding the lease, 0 for none. It may answer reads until `until`, and its
     * lease ends only when it answers a revocation or exits, even after `until`.
     */
    this.holder = 0
    this.until = 0
    this.grant = 0
    /** @type {Promise<void>|null} */
    this.revoking = null
    /** No grant before this (after a revocation), and how long the last wait was. */
    this.quietUntil = 0
    this.backoff = 0
  }
}

/**
 * Answer one store request with the backend, keeping the leases: grants on
 * reads and saves that ask for one (`lease: 1`), revocations before writes.
 * Every write is checked, whether or not its sender takes leases.
 * @param {import('./cluster-backend').SessionBackend} backend
 * @param {SessionLeases} leases
 * @param {object} msg
 * @param {number} pid the caller
 * @returns {*} the answer, or a Promise of it
 */
function answerWithLeases (backend, leases, msg, pid) {
  return answerLeased(backend, leases, msg, pid, false)
}

/**
 * answerWithLeases(); `waited`: the request waited for a revocation, so `pid` may
 * have exited meanwhile: it gets no lease (a grant goes only to a worker whose
 * message is being read, so never to one already forgotten).
 */
function answerLeased (backend, leases, msg, pid, waited) {
  const op = msg && msg.op
  if (op === SESSION_OP.GET) {
    const key = keyOf(prefixOf(msg), msg.sid)
    // The holder may have answered saves the primary has not read yet: revoke first.
    const wait = leases.beforeAccess(key, pid)
    if (wait !== null) return wait.then(() => answerLeased(backend, leases, msg, pid, true))
    const json = backend.dispatch(msg)
    if (json === null || msg.lease !== 1 || waited) return json
    const grant = leases.grant(key, pid)
    return grant === 0 ? json : [json, backend.expiresOf(key), grant, leases.leaseMs]
  }
  if (op === SESSION_OP.SET || op === SESSION_OP.TOUCH || op === SESSION_OP.DESTROY) {
    const key = keyOf(prefixOf(msg), msg.sid)
    const wait = leases.beforeAccess(key, pid)
    if (wait !== null) return wait.then(() => answerLeased(backend, leases, msg, pid, true))
    const answer = backend.dispatch(msg)
    if (op === SESSION_OP.TOUCH) leases.touched(key)
    else if (op === SESSION_OP.DESTROY) leases.destroyed(key)
    else if (msg.lease === 1 && !waited && backend.expiresOf(key) !== 0) {
      const grant = leases.grant(key, pid)
      if (grant !== 0) return [grant, leases.leaseMs]
    }
    return answer
  }
  if (op === SESSION_OP.CLEAR) {
    const wait = leases.beforeClear(pid)
    if (wait !== null) return wait.then(() => answerLeased(backend, leases, msg, pid, true))
    const answer = backend.dispatch(msg)
    leases.cleared()
    return answer
  }
  if (op === SESSION_OP.ALL) {
    const wait = leases.beforeReadAll(pid)
    if (wait !== null) return wait.then(() => backend.dispatch(msg))
  }
  if (op === SESSION_OP.CONFIGURE && msg.maxTotalBytes < backend.maxTotalBytes) {
    // A store's deprecated maxTotalBytes lowers the bound a holder checked its saves against before
    // it answered them: no more leases, and the bound changes once the saves already answered are applied.
    debug('clusterStore.maxTotalBytes lowered at runtime to %d: read leases end', msg.maxTotalBytes)
    return leases.suspend().then(() => backend.dispatch(msg))
  }
  return backend.dispatch(msg)
}

function noop () {}

function prefixOf (msg) {
  return typeof msg.prefix === 'string' ? msg.prefix : ''
}

module.exports = { SessionLeases, answerWithLeases, FORGET_AFTER_MS }
