'use strict'

/**
 * socket.io recovery across a primary upgrade (lib/primary/upgrade.js): the
 * old primary's recovery state moves to the new one, and the two act as one
 * until the old one is gone. Read ./recovery-service.js first.
 *
 * Before `go`, the old primary sends its state in batches: per namespace
 * the epoch and the last sequence number (the new primary goes on from
 * them: an offset a client holds stays valid and is never given twice), the
 * packets of the log and the persisted sessions with their expiry; then the
 * sockets its workers hold now (with the last state they reported). From
 * that moment it numbers nothing itself: it relays what its workers send
 * (broadcasts, persists, restores, the sockets they hold) to the new
 * primary, which numbers the broadcasts of both sets of workers in one
 * sequence and sends every numbered packet back down, for the old workers'
 * clients. A client cut by the old worker's drain (1012) that reconnects to
 * a new worker finds its session there: its restore waits, as within one
 * primary, until the old worker has persisted it (through the relay) or
 * has exited (its last reported state is persisted then).
 *
 * The new primary holds its own workers' broadcasts and restores until the
 * state is taken over (`go`, or the old primary gone), so that none is
 * numbered in another epoch first.
 *
 * With bus.redis the packets and the sessions are in Redis already: only the
 * sockets held by the old workers are handed over and relayed (so a restore
 * on the new primary waits for the old worker's persist to Redis).
 *
 * The messages between the primaries carry the app's values (packet
 * arguments, socket.data): with bus.serialization 'advanced' they travel as
 * one v8 structured clone (base64) on the upgrade's JSON channel, so a Date or
 * a Map arrives as it was sent.
 */

const v8 = require('v8')
const debug = require('debug')('clusterize:socket.io')
const { replayable, PACKET_ARGUMENTS } = require('./recovery-log')
const { binariesUnder } = require('./binary')
const { createPendingCalls } = require('../services/pending-calls')

/** Packets or sessions per message: a large log goes over in many bounded writes. */
const BATCH = 500
/** A relayed request with no answer by then fails (the worker's own timeout is shorter). */
const RELAY_TIMEOUT_MS = 60000

/**
 * @param {object} body
 * @param {'json'|'advanced'} serialization the old primary's bus.serialization
 */
function pack (body, serialization) {
  return serialization === 'advanced' ? { v8: v8.serialize(body).toString('base64') } : { j: body }
}

/** @returns {object|null} null for what cannot be read (a v8 format from a newer Node than this one reads) */
function unpack (x) {
  if (!x || typeof x !== 'object') return null
  if (typeof x.v8 !== 'string') return x.j && typeof x.j === 'object' ? x.j : null
  try {
    return v8.deserialize(Buffer.from(x.v8, 'base64'))
  } catch (err) {
    debug('recovery: a message from the other primary cannot be read: %s', err.message)
    return null
  }
}

/**
 * The old primary's side: send the state (now), then relay.
 * @param {import('./recovery-service').RecoveryService} service
 * @param {{ send: (kind: 'recovery'|'sio', x: object) => void, serialization?: string }} channel
 *   `send` writes to the new primary (ordered, as the IPC channel is)
 * @returns {{ onMessage: (x: object) => void, cancel: () => void }}
 */
function handOver (service, channel) {
  const serialization = channel.serialization === 'advanced' ? 'advanced' : 'json'
  const send = (kind, body) => channel.send(kind, pack(body, serialization))
  const shared = Boolean(service.options.redis)
  const pending = createPendingCalls({ unref: true })
  let counts = { packets: 0, sessions: 0, live: 0 }

  send('recovery', { part: 'begin', shared, s: serialization })
  if (!shared) counts = sendLog(service.log, (body) => send('recovery', body))
  const live = exportLive(service.live)
  counts.live = live.length
  for (let i = 0; i < live.length; i += BATCH) send('recovery', { part: 'live', live: live.slice(i, i + BATCH) })
  debug('recovery: handed over %d packets, %d sessions, %d live sockets', counts.packets, counts.sessions, counts.live)

  function ask (data) {
    return pending.add({}, RELAY_TIMEOUT_MS, (call) => answer(call, { e: 'no answer from the new primary in time' }), (id) => {
      send('sio', { k: 'q', id, d: data })
    })
  }

  function answer (call, body) {
    if (body.e !== undefined) call.reject(new Error(`recovery (new primary): ${body.e}`))
    else call.resolve(body.v)
  }

  service.relay = {
    /** @returns {boolean} handled there only (not here too) */
    notify (data) {
      if (data.op === 'cfg') return false
      if (data.op === 'pub' && shared) return false
      send('sio', { k: 'n', d: data })
      return data.op === 'pub'
    },
    request (data) {
      if (shared) {
        // Persisted to Redis from here; then the new primary's restores waiting for this socket may go on.
        const persisted = service.handleRequest(data)
        if (data.op !== 'persist') return persisted
        return Promise.resolve(persisted).finally(() => send('sio', { k: 'n', d: { op: 'gone', n: data.n, s: data.session.pid } }))
      }
      // Kept here too: if the new primary fails before it serves, this one goes on with it.
      if (data.op === 'persist') service.persist(data.n, data.session)
      return ask(data)
    },
    exited (workerPid) {
      send('sio', { k: 'x', w: workerPid })
    }
  }

  return {
    /** What the new primary sends back: an answer, or a numbered packet for this primary's workers. */
    onMessage: guarded(function onMessage (x) {
      const body = unpack(x)
      if (body === null) return
      if (body.k === 'a') {
        const call = pending.take(body.id)
        return call === undefined ? undefined : answer(call, body)
      }
      if (body.k === 'd' && typeof body.n === 'string' && body.m && !service.closed) {
        if (!shared) mirror(service.log, body.n, body.m)
        try {
          service.hooks.deliver(body.n, body.m)
        } catch (err) {
          debug('recovery: relayed packet not delivered: %s', err.message)
        }
      }
    }, service),
    /** The new primary is gone (failed, or the upgrade was abandoned): number here again. */
    cancel () {
      if (service.relay === null) return
      service.relay = null
      pending.failAll((call) => answer(call, { e: 'the new primary went away' }))
    }
  }
}

/** A message handler on the IPC channel: what it throws must not take the primary down. */
function guarded (fn, service) {
  return function guardedHandler (x) {
    try {
      fn(x)
    } catch (err) {
      const log = service.options.log
      if (log) log.error(`socket.io recovery: a message from the other primary of the upgrade failed: ${err && err.message}`, { err })
      else debug('recovery: a message from the other primary failed: %s', err && err.stack)
    }
  }
}

/** Every namespace's epoch, sequence, bounds, packets and sessions, in batches. */
function sendLog (log, send) {
  const counts = { packets: 0, sessions: 0, live: 0 }
  const now = Date.now()
  for (const state of log.namespaces.values()) {
    state.trim(now)
    send({ part: 'ns', n: state.name, epoch: state.epoch, seq: state.seq, d: state.maxDisconnectionDuration, p: state.maxPackets, x: state.maxSessions })
    const entries = state.entries.slice(state.first)
    for (let i = 0; i < entries.length; i += BATCH) send({ part: 'packets', n: state.name, entries: entries.slice(i, i + BATCH) })
    const sessions = Array.from(state.sessions, ([pid, entry]) => [pid, entry.session, entry.expiresAt])
    for (let i = 0; i < sessions.length; i += BATCH) send({ part: 'sessions', n: state.name, sessions: sessions.slice(i, i + BATCH) })
    counts.packets += entries.length
    counts.sessions += sessions.length
  }
  return counts
}

/** [nsp, pid, worker pid, last reported session] of each socket connected now. */
function exportLive (live) {
  const out = []
  for (const workerPid of live.processes()) {
    for (const { nsp, pid, session } of live.heldBy(workerPid)) out.push([nsp, pid, workerPid, session])
  }
  return out
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

/**
 * The new primary's side. Call service.hold() before its workers can reach
 * it (./recovery-service.js does when the primary is an upgrade's).
 * @param {import('./recovery-service').RecoveryService} service
 * @param {{ send: (kind: 'sio', x: object) => void }} channel writes to the old primary
 * @returns {{ onRecovery: Function, onRelay: Function, go: Function, oldGone: Function }}
 */
function takeOver (service, channel) {
  let begun = null
  const taken = { packets: 0, sessions: 0, live: 0 }
  /** Namespaces this primary numbered in before the state came (none while held): not taken over. */
  const skipped = new Set()
  /** Sessions persisted here before the state came, by namespace: after the old ones at go (the Map is in expiry order). */
  const own = new Map()
  const reply = (body) => channel.send('sio', pack(body, begun ? begun.s : 'json'))

  function onRecovery (x) {
    const body = unpack(x)
    if (body === null) return
    if (body.part === 'begin') begun = body
    else if (body.part === 'ns') adoptNamespace(body)
    else if (body.part === 'packets' && !skipped.has(body.n) && Array.isArray(body.entries)) {
      const state = service.namespace(body.n)
      for (const entry of body.entries) state.entries.push(entry)
      taken.packets += body.entries.length
    } else if (body.part === 'sessions' && !skipped.has(body.n) && Array.isArray(body.sessions)) {
      adoptSessions(service.namespace(body.n), body.sessions)
      taken.sessions += body.sessions.length
    } else if (body.part === 'live' && Array.isArray(body.live)) {
      for (const [nsp, pid, workerPid, session] of body.live) markForeign(nsp, pid, workerPid, session)
      taken.live += body.live.length
    }
  }

  function adoptNamespace (header) {
    const state = service.namespace(header.n)
    if (state.seq !== 0 || state.size !== 0) {
      skipped.add(header.n)
      debug('recovery: namespace %s numbered here already: its old state is not taken over', header.n)
      return
    }
    state.epoch = header.epoch
    state.seq = header.seq
    if (state.sessions.size > 0) own.set(header.n, Array.from(state.sessions))
    state.sessions.clear()
    // This primary's workers said what they want (a changed maxDisconnectionDuration takes effect).
    if (!state.configured) {
      state.maxDisconnectionDuration = header.d
      state.maxPackets = header.p
      state.maxSessions = header.x
    }
  }

  function adoptSessions (state, list) {
    for (const [pid, session, expiresAt] of list) {
      if (typeof pid === 'string' && session && typeof expiresAt === 'number') state.sessions.set(pid, { session, expiresAt })
    }
  }

  function markForeign (nsp, pid, workerPid, session) {
    if (typeof nsp !== 'string' || typeof pid !== 'string' || !Number.isInteger(workerPid)) return
    service.foreign.add(workerPid)
    service.live.mark(nsp, pid, workerPid, session)
  }

  /** What the old primary's workers send, relayed. */
  function onRelay (x) {
    const body = unpack(x)
    if (body === null) return
    if (body.k === 'n' && body.d) {
      if (body.d.op === 'live') service.foreign.add(body.d.w)
      service.onQueueMessage(body.d, service.fromThisHost)
    } else if (body.k === 'x' && Number.isInteger(body.w)) {
      service.forgetProcess(body.w)
    } else if (body.k === 'q') {
      Promise.resolve().then(() => service.onStateRequest(body.d))
        .then((v) => reply({ k: 'a', id: body.id, v: v === undefined ? null : v }), (err) => reply({ k: 'a', id: body.id, e: String(err && err.message) }))
    }
  }

  return {
    onRecovery: guarded(onRecovery, service),
    onRelay: guarded(onRelay, service),
    /** Serve: every packet numbered here from now on goes to the old primary's workers too. */
    go: guarded(function go () {
      // With bus.redis the log is Redis's; its in-memory part (service.log.memory) took nothing.
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
      if (begun !== null && !begun.shared) service.downstream = (name, message) => reply({ k: 'd', n: name, m: message })
      debug('recovery: took over %d packets, %d sessions, %d live sockets', taken.packets, taken.sessions, taken.live)
      service.release()
    }, service),
    /** The old primary exited (its workers with it): what they held and did not persist is persisted from here. */
    oldGone: guarded(function oldGone () {
      service.downstream = null
      for (const workerPid of service.foreign) service.forgetProcess(workerPid)
      service.foreign.clear()
      service.release()
    }, service)
  }
}

module.exports = { handOver, takeOver, pack, unpack, BATCH }
