'use strict'

/**
 * The primary's side of 'balanced' scheduling: workers accept new
 * connections from the shared listening socket themselves, at the kernel's
 * speed, and stop accepting while they hold more than their share.
 *
 * Why not 'none' as it is. With node:cluster's SCHED_NONE the primary's
 * SharedHandle (lib/internal/cluster/shared_handle.js) binds the socket with
 * net._createServerHandle() and sends it to every worker, whose listen()
 * starts libuv's watcher on its copy. libuv registers the descriptor in each
 * worker's epoll without EPOLLEXCLUSIVE, so every idle worker wakes on a new
 * connection, and uv__server_io() (src/unix/stream.c) then accepts in a loop
 * until EAGAIN (UV_TCP_SINGLE_ACCEPT only adds a 1 ns sleep between
 * accepts). Whichever worker the scheduler runs first drains the whole
 * backlog: 100 keep-alive connections opened at once land 11/74/3/12 over
 * four workers and stay there for their whole life. A worker blocked in a
 * handler never competes (it is not in epoll_wait), but one that is merely
 * late competes as soon as it gets back to its loop. And SharedHandle closes
 * the socket when its last worker leaves it (all dead, or all closed their
 * copy), so queued connections are reset.
 *
 * What 'balanced' does instead:
 * - The primary binds the socket itself (net._createServerHandle, as
 *   SharedHandle does; behind a feature check, see bindableHandle()) and
 *   keeps its copy for the life of the service without ever listening on it:
 *   it never wakes for a connection and does no work per connection. The
 *   socket (and every queued connection) outlives any worker.
 * - A worker asks for a copy (LISTEN_ASK) and listens on it; the first
 *   listen(2) puts the socket in LISTEN state, which outlives that copy.
 *   To stop accepting, a worker closes its copy: the kernel keeps queued
 *   connections for the workers still listening. Closing it inside the
 *   accept callback also ends libuv's accept loop at once (it runs while
 *   the descriptor is open), so a worker takes no more than its limit even
 *   from a full backlog. It resumes on a spare copy it already holds (no
 *   round trip), and asks for the next spare.
 * - The limit: a worker may hold `floor(avg * (1 + MARGIN)) + SLACK` open
 *   connections, where avg is the mean over the ready workers that are not
 *   late, and no more than the fewest that an accepting worker reported
 *   lately plus SPREAD of the mean (so a worker short of CPU in a burst is
 *   waited for, for FRESH_MS at most). The worker knows its own count at every accept and close; the
 *   others' come here in LOAD reports (at once when it pauses, otherwise
 *   spaced out: lib/worker/balanced-listen.js) and the limit goes back in SHARE messages, only
 *   when it moved enough to matter, or a paused worker may resume. The
 *   worker with the fewest connections is always under the limit (avg plus
 *   SLACK is above it), so once its report is in, someone accepts: the
 *   share rule cannot stop the whole service.
 * - Late: the same verdict 'rr' uses to pass over a worker (health.js
 *   isOverloaded(): event-loop delay p99 over maxEventLoopDelayMs and twice
 *   the best other's), never for every worker at once.
 * - A worker that hears nothing from the primary for a few heartbeats
 *   ignores its limit (lib/worker/balanced-listen.js): a stuck primary must
 *   not stop the workers from accepting.
 *
 * Per connection the primary does nothing; it handles a bounded stream of
 * reports (about 1,000 a second at most for the whole cluster while
 * connections come and go), and one handle send per pause. Upgrades and 'sticky' keep their own modes.
 */

const dns = require('dns')
const net = require('net')
const util = require('util')
const debug = require('debug')('clusterize:balanced')
const protocol = require('../protocol')
const { descriptorOf } = require('./inherit')

/** A worker may hold this fraction over the mean... */
const MARGIN = 0.1
/** ...plus this many connections, so small counts do not flap. */
const SLACK = 2
/**
 * And no worker may hold more than the fewest (among workers accepting and
 * reporting lately) plus this fraction of the mean (at least 2 * SLACK): in a
 * burst a worker short of CPU falls behind, and the mean alone lets the
 * others take what it would have.
 */
const SPREAD = 0.1
/**
 * How lately the fewest must have reported to hold the others back: a worker
 * blocked in a handler (not yet judged late) stops reporting, and must not
 * stop the others for longer than this. Raised with the worker count, since
 * reports are spaced by 1 ms per worker (lib/worker/balanced-listen.js).
 */
const FRESH_MS = 50

/**
 * Can this Node bind a listening socket without listening on it? It is the
 * helper node:cluster's own SharedHandle uses; a Node without it gets 'none'.
 * @returns {boolean}
 */
function canBalance () {
  return typeof net._createServerHandle === 'function'
}

/**
 * The limit for a mean of `avg` open connections per accepting worker.
 * @param {number} avg
 * @returns {number}
 */
function limitFor (avg) {
  return Math.floor(avg * (1 + MARGIN)) + SLACK
}

/**
 * @param {{ port: number, host?: string, workers?: number, fd?: number, held?: boolean }} options
 *   held: a new primary of `clusterize upgrade`: its workers take their copy of the socket
 *   (and report ready) but accept nothing, limit 0, until release() at the old primary's go,
 *   as an 'rr' primary accepts nothing before go. Sessions and app state are handed over at
 *   go: a request served earlier by a new worker would not find them.
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {{ isOverloaded: (record: object) => boolean }} health
 */
function createBalancer (options, supervisor, health) {
  /** record -> { count, paused, sentLimit, sentLate } */
  const loads = new Map()
  const listenMessage = protocol.listen()
  let handle = null
  let closed = false
  let shareScheduled = false
  let capTimer = null
  let held = options.held === true
  const freshMs = Math.max(FRESH_MS, 3 * (options.workers || 1))

  supervisor.on('record:heartbeat', onHeartbeat)
  supervisor.on('record:ready', onMembershipChange)
  supervisor.on('record:exit', onExit)

  function loadOf (record) {
    let load = loads.get(record)
    if (!load) {
      load = { count: 0, paused: false, sentLimit: -1, sentLate: false, reportedAt: 0 }
      loads.set(record, load)
    }
    return load
  }

  /** Late: overloaded while at least one other ready worker is not (never all). */
  function lateRecords (ready) {
    const late = new Set()
    for (let i = 0; i < ready.length; i++) if (health.isOverloaded(ready[i])) late.add(ready[i])
    if (late.size === ready.length) late.clear()
    return late
  }

  function currentLimit (ready, late) {
    const now = Date.now()
    let sum = 0
    let n = 0
    let fewest = Infinity
    for (let i = 0; i < ready.length; i++) {
      if (late.has(ready[i])) continue
      const load = loadOf(ready[i])
      sum += load.count
      n++
      if (!load.paused && now - load.reportedAt <= freshMs && load.count < fewest) fewest = load.count
    }
    const avg = n > 0 ? sum / n : 0
    const byMean = limitFor(avg)
    const byFewest = fewest + Math.max(2 * SLACK, Math.ceil(avg * SPREAD))
    if (byFewest >= byMean) return byMean
    // The fewest's reports may stop (blocked): look again once they would be stale.
    if (capTimer === null && !closed) {
      capTimer = setTimeout(function recheck () {
        capTimer = null
        if (!closed) share(null)
      }, freshMs)
      capTimer.unref()
    }
    return byFewest
  }

  /**
   * Tell workers their limit when it matters: `force` for this one record
   * (its heartbeat: the worker's proof that the primary is alive).
   */
  function share (force) {
    const ready = supervisor.readyRecords()
    const late = lateRecords(ready)
    const limit = held ? 0 : currentLimit(ready, late)
    for (let i = 0; i < ready.length; i++) {
      const record = ready[i]
      const load = loadOf(record)
      const isLate = late.has(record)
      const moved = Math.abs(limit - load.sentLimit) >= Math.max(SLACK, Math.ceil(load.sentLimit * MARGIN))
      const unblocks = load.paused && !isLate && limit > load.count && limit !== load.sentLimit
      if (record !== force && !moved && !unblocks && isLate === load.sentLate) continue
      load.sentLimit = limit
      load.sentLate = isLate
      record.channel.post(protocol.share(limit, isLate))
    }
    // A worker not (yet) in a slot (a reload's new one, before it takes over)
    // still accepts; give it the cluster's limit rather than its first guess.
    if (force && !ready.includes(force) && force.isLive() && !force.isRetiring()) {
      force.channel.post(protocol.share(limit, false))
    }
  }

  /** Reports that come in one loop turn are answered once: O(workers) per turn, not per report. */
  function scheduleShare () {
    if (shareScheduled) return
    shareScheduled = true
    setImmediate(function shareOnce () {
      shareScheduled = false
      if (!closed) share(null)
    })
  }

  function onHeartbeat (record) {
    // After health.js has judged this heartbeat (its listener runs after ours).
    queueMicrotask(() => share(record))
  }

  function onMembershipChange () {
    share(null)
  }

  function onExit (record) {
    loads.delete(record)
    share(null)
  }

  return {
    /**
     * Bind the port (without listening on it).
     * @returns {Promise<{ port: number }>}
     */
    async listen () {
      const { address, family } = await resolveHost(options.host)
      // A socket inherited (an upgrade, systemd) is taken as it is: listening already, workers of the old primary accepting on it.
      const result = options.fd !== undefined
        ? net._createServerHandle(null, 0, undefined, options.fd, 0)
        : net._createServerHandle(address, options.port, family, undefined, 0)
      if (typeof result === 'number') throw listenError(result, options)
      handle = result
      const out = {}
      const err = handle.getsockname(out)
      if (err) throw listenError(err, options)
      debug('bound %s:%d for the workers', out.address, out.port)
      return { port: out.port, address: out.address }
    },

    /** @returns {number|null} the descriptor of our copy, to pass to a new primary (`clusterize upgrade`) */
    descriptor () {
      return descriptorOf(handle)
    },

    /** A worker asks for a copy of the listening socket. */
    onListenAsk (record) {
      if (closed || handle === null || !record.isLive()) return
      // Held: the limit goes first (postNow keeps the order), so the copy is not listened on.
      if (held) record.channel.post(protocol.share(0, false))
      record.channel.postNow(listenMessage, handle, function onSent (err) {
        // Our copy stays open either way: it is what keeps the socket.
        if (err) debug('sending the listening socket to worker %d failed: %s', record.id, err.message)
      })
    },

    /** The old primary said go: the workers accept from now on (see options.held). */
    release () {
      if (!held) return
      held = false
      share(null)
    },

    /** A worker's open connections, and whether it stopped accepting. */
    onLoad (record, message) {
      if (!Number.isInteger(message.c) || message.c < 0) return
      const load = loadOf(record)
      load.count = message.c
      load.paused = message.p === true
      load.reportedAt = Date.now()
      scheduleShare()
    },

    /** Stop handing out copies and close ours; the socket closes with the last worker's. */
    close () {
      closed = true
      if (capTimer !== null) clearTimeout(capTimer)
      supervisor.removeListener('record:heartbeat', onHeartbeat)
      supervisor.removeListener('record:ready', onMembershipChange)
      supervisor.removeListener('record:exit', onExit)
      if (handle === null) return Promise.resolve()
      const closing = handle
      handle = null
      return new Promise((resolve) => closing.close(resolve))
    },

    /** What the primary knows of a worker's load, for stats(). */
    loadOf (record) {
      const load = loads.get(record)
      return load ? { open: load.count, accepting: !load.paused, limit: load.sentLimit } : undefined
    }
  }
}

/** The address and family to bind, as net.Server#listen would pick them. */
async function resolveHost (host) {
  // No host: _createServerHandle tries '::' then '0.0.0.0', like listen().
  if (!host) return { address: null, family: 4 }
  const family = net.isIP(host)
  if (family !== 0) return { address: host, family }
  const found = await dns.promises.lookup(host)
  return { address: found.address, family: found.family }
}

function listenError (errno, options) {
  const code = util.getSystemErrorName(errno)
  const err = new Error(`listen ${code}: ${options.host || '::'}:${options.port}`)
  err.code = code
  err.errno = errno
  err.syscall = 'listen'
  err.port = options.port
  return err
}

module.exports = { createBalancer, canBalance }
