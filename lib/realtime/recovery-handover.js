'use strict'

/**
 * socket.io recovery across a primary upgrade: what the recovery service
 * gives lib/primary/handover.js, the one mechanism that carries every
 * service's state from the old primary to the new one. Read
 * ./recovery-service.js first.
 *
 * export(), old primary: per namespace the epoch and the last sequence number
 * (the new primary goes on from them: an offset a client holds stays valid
 * and is never given twice), the packets of the log and the persisted
 * sessions with their expiry; then the sockets its workers hold now (with the
 * last state they reported). From then on the old workers' broadcasts go to
 * the new primary (route), which numbers both generations' in one sequence
 * and sends every numbered packet back down (attach, fromSuccessor) for the
 * old workers' clients. A client cut by the old worker's drain (1012) that
 * reconnects to a new worker finds its session there: its restore waits, as
 * within one primary, until the old worker has persisted it (passed on) or
 * has exited (its last reported state is persisted then).
 *
 * The old primary keeps what it passes on (persists, the numbered packets,
 * the sockets held): should the new one fail before it serves, this one goes
 * on numbering after every offset given meanwhile.
 *
 * The new primary holds its workers' broadcasts and restores, and other
 * hosts' broadcasts, until the state is taken over (settled, or the old
 * primary gone), so that none is numbered in another epoch first.
 *
 * With bus.redis the packets and the sessions are in Redis already: only the
 * sockets held by the old workers are handed over, and a persist is written
 * by the old primary, then passed on (the new primary's restores waiting
 * for that socket go on).
 *
 * The items, one per packet, session or socket (lib/primary/handover.js
 * batches them): ['begin', shared], ['ns', name, epoch, seq, maxDisconnectionDuration,
 * maxPackets, maxSessions], ['p', name, entry], ['s', name, pid, session, expiresAt],
 * ['l', nsp, pid, workerPid, session].
 */

const debug = require('debug')('clusterize:socket.io')
const { replayable, PACKET_ARGUMENTS } = require('./recovery-log')
const { binariesUnder } = require('./binary')

/**
 * @param {import('./recovery-service').RecoveryService} service
 * @returns {object} the service's `handover` (lib/primary/handover.js)
 */
function recoveryHandover (service) {
  const shared = Boolean(service.options.redis)
  /** New primary: what the old one said (its 'begin'), once it came. */
  let begun = null
  const taken = { packets: 0, sessions: 0, live: 0 }
  /** Namespaces this primary numbered in before the state came (none while held): not taken over. */
  const skipped = new Set()
  /** Sessions persisted here before the state came, by namespace: after the old ones (the Map is in expiry order). */
  const own = new Map()

  function adoptNamespace ([, name, epoch, seq, maxDisconnectionDuration, maxPackets, maxSessions]) {
    if (typeof name !== 'string') return
    const state = service.namespace(name)
    if (state.seq !== 0 || state.size !== 0) {
      skipped.add(name)
      debug('recovery: namespace %s numbered here already: its old state is not taken over', name)
      return
    }
    state.epoch = epoch
    state.seq = seq
    if (state.sessions.size > 0) own.set(name, Array.from(state.sessions))
    state.sessions.clear()
    // This primary's workers said what they want (a changed maxDisconnectionDuration takes effect).
    if (!state.configured) {
      state.maxDisconnectionDuration = maxDisconnectionDuration
      state.maxPackets = maxPackets
      state.maxSessions = maxSessions
    }
  }

  function importItem (item) {
    if (!Array.isArray(item)) return
    const [kind, name] = item
    if (kind === 'begin') {
      begun = { shared: item[1] === true }
    } else if (kind === 'ns') {
      adoptNamespace(item)
    } else if (kind === 'p' && typeof name === 'string' && !skipped.has(name) && item[2]) {
      service.namespace(name).entries.push(item[2])
      taken.packets++
    } else if (kind === 's' && typeof name === 'string' && !skipped.has(name)) {
      const [, , pid, session, expiresAt] = item
      if (typeof pid === 'string' && session && typeof expiresAt === 'number') service.namespace(name).sessions.set(pid, { session, expiresAt })
      taken.sessions++
    } else if (kind === 'l') {
      const [, nsp, pid, workerPid, session] = item
      if (typeof nsp !== 'string' || typeof pid !== 'string' || !Number.isInteger(workerPid)) return
      service.foreign.add(workerPid)
      service.live.mark(nsp, pid, workerPid, session)
      taken.live++
    }
  }

  return {
    /** Old primary: the state now, as items. */
    export () {
      const items = [['begin', shared]]
      if (!shared) exportLog(service.log, items)
      exportLive(service.live, items)
      debug('recovery: handing over %d items', items.length)
      return items
    },

    /**
     * Old primary, while its workers are passed on: broadcasts are numbered there
     * (with bus.redis, in Redis from here, as every host's); persists are kept here
     * too; settings stay here; the sockets held are tracked in both.
     */
    route (kind, method) {
      if (kind === 'exit') return 'both'
      if (kind === 'request') return method === 'persist' ? 'both' : (shared ? 'here' : 'there')
      if (method === 'cfg') return 'here'
      if (method === 'pub') return shared ? 'here' : 'there'
      return 'both'
    },

    /** Old primary: a packet the new one numbered, for this primary's workers. */
    fromSuccessor (data) {
      if (!data || typeof data.n !== 'string' || !data.m || service.closed) return
      if (!shared) mirror(service.log, data.n, data.m)
      service.hooks.deliver(data.n, data.m)
    },

    /** New primary: items of the old one's export(), in its order. */
    import (items) {
      for (const item of items) importItem(item)
    },

    /** New primary: all the state is here; every packet numbered here from now on goes to the old workers too. */
    attach (predecessor) {
      const now = Date.now()
      for (const [name, entries] of own) {
        const sessions = service.namespace(name).sessions
        for (const [pid, entry] of entries) {
          sessions.delete(pid)
          sessions.set(pid, entry)
        }
      }
      own.clear()
      if (service.log.namespaces !== undefined) for (const state of service.log.namespaces.values()) state.trim(now)
      if (begun !== null && !begun.shared) service.downstream = (name, message) => predecessor.send({ n: name, m: message })
      debug('recovery: took over %d packets, %d sessions, %d live sockets', taken.packets, taken.sessions, taken.live)
    },

    /** New primary: serve (the held broadcasts and restores go now). */
    settled () {
      service.release()
    },

    /** New primary: the old one is gone; its workers are forgotten as each process ends (lib/primary/handover.js). */
    detach () {
      service.downstream = null
      service.release()
    }
  }
}

/** Every namespace's header, packets and sessions. */
function exportLog (log, items) {
  const now = Date.now()
  for (const state of log.namespaces.values()) {
    state.trim(now)
    items.push(['ns', state.name, state.epoch, state.seq, state.maxDisconnectionDuration, state.maxPackets, state.maxSessions])
    for (let i = state.first; i < state.entries.length; i++) items.push(['p', state.name, state.entries[i]])
    for (const [pid, entry] of state.sessions) items.push(['s', state.name, pid, entry.session, entry.expiresAt])
  }
}

/** Each socket connected now, with the worker holding it and its last reported session. */
function exportLive (live, items) {
  for (const workerPid of live.processes()) {
    for (const { nsp, pid, session } of live.heldBy(workerPid)) items.push(['l', nsp, pid, workerPid, session])
  }
}

/**
 * A packet the new primary numbered, kept in this primary's log too: should
 * the new one fail before it serves, this one goes on after it and never
 * gives one of its offsets again.
 */
function mirror (log, name, message) {
  if (typeof message.q !== 'number') return
  const state = log.namespace(name)
  if (message.o !== state.offsetOf(message.q)) return
  const kept = replayable(message.m)
  if (kept !== null && message.q > state.seq) {
    const entry = { seq: message.q, at: Date.now(), rooms: kept.opts.rooms, except: kept.opts.except, data: kept.packet.data }
    const binaries = binariesUnder(message.b, PACKET_ARGUMENTS)
    if (binaries !== undefined) entry.b = binaries
    state.entries.push(entry)
  }
  state.seq = Math.max(state.seq, message.q)
}

module.exports = { recoveryHandover }
