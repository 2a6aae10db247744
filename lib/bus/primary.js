'use strict'

/**
 * The bus inside the primary: a relay between workers, the home of request
 * handlers, the coordinator of gathers, and (through the bridge) the link to
 * other hosts.
 *
 * Payloads arrive already encoded by the sender and are relayed as they are:
 * one relay envelope per message, posted to every recipient's ipc.Channel,
 * which coalesces everything posted in a tick into one IPC write per worker.
 */

const debug = require('debug')('clusterize:bus')
const { BUS_OP, bus: busMessage } = require('../protocol')
const { isTopic, deliverLater } = require('./core')
const { queuedSize, RESERVED_PREFIX } = require('./codec')
const { MAX_TIMER_MS } = require('../errors')


/** Envelopes a worker may send; anything else is ignored. */
const FROM_WORKER = new Set([BUS_OP.BROADCAST, BUS_OP.BROADCASTS, BUS_OP.SEND, BUS_OP.REQUEST, BUS_OP.GATHER, BUS_OP.HANDLER_REPLY])

/**
 * @param {import('./core').BusCore} core
 */
function createPrimaryTransport (core) {
  /** @type {Set<import('../primary/worker-record').WorkerRecord>} as given by busAddWorker */
  const records = new Set()
  /** @type {Map<number, object>} gathers in flight, by primary-side id */
  const gathers = new Map()
  let nextGatherId = 1
  /** @type {Map<object, object>} per worker: the 'M' envelope still queued in its channel */
  const openRelays = new Map()
  /** Messages not relayed to a worker because too much was already queued for it (bus.maxQueuedBytes). */
  let droppedTotal = 0
  /** Workers currently losing messages (logged once per episode). */
  const dropping = new WeakSet()

  /**
   * Count a message towards what is queued for `record`. A worker that does
   * not read fast enough loses messages (counted, logged once per episode)
   * instead of making the primary hold them without bound.
   * @returns {boolean} false when the message must be dropped for this worker
   */
  function reserveFor (record, topic, payload) {
    const bytes = queuedSize(topic, payload)
    const limit = core.codec.maxQueuedBytes
    if (record.channel.queuedBytes + bytes > limit) {
      droppedTotal++
      if (!dropping.has(record)) {
        dropping.add(record)
        core.log.warn(`bus: worker ${record.id} is not reading its messages fast enough: over ${limit} bytes queued for it (bus.maxQueuedBytes), dropping messages to it until it catches up`, { pid: record.pid })
      }
      return false
    }
    if (dropping.has(record) && record.channel.queuedBytes < limit / 2) dropping.delete(record)
    record.channel.reserve(bytes)
    return true
  }

  /**
   * @param {boolean} [batched] share one write per loop turn (answers to library requests, which
   *   come many per turn); otherwise written at once when the channel is idle
   */
  function post (record, message, batched) {
    try {
      if (batched) record.channel.post(message)
      else record.channel.postSoon(message)
    } catch (err) {
      debug('post to worker %s failed: %s', record.id, err.message)
    }
  }

  /** The record that `send(workerId)` should reach: the READY one of that slot, else the newest live one. */
  function recordForSlot (workerId) {
    let best = null
    for (const record of records) {
      if (record.id !== workerId || !record.isLive()) continue
      if (best === null) {
        best = record
        continue
      }
      const bestReady = best.isReady()
      const ready = record.isReady()
      if ((ready && !bestReady) || (ready === bestReady && (record.generation || 0) > (best.generation || 0))) best = record
    }
    return best
  }

  /**
   * Relay one encoded message. Consecutive relays to a worker within a tick
   * share one 'M' envelope (a flat [topic, payload, from, generation, ...]
   * array): far fewer bytes and objects to encode than one envelope each.
   */
  function relay (topic, payload, from, generation, host, except) {
    if (host !== undefined) {
      const message = busMessage.relay(topic, payload, from, generation, host)
      for (const record of records) {
        if (record !== except && reserveFor(record, topic, payload)) post(record, message)
      }
      return
    }
    for (const record of records) {
      if (record === except) continue
      if (!reserveFor(record, topic, payload)) continue
      const open = openRelays.get(record)
      if (open !== undefined && record.channel.lastQueued() === open) {
        open.m.push(topic, payload, from, generation)
      } else {
        const message = busMessage.relays([topic, payload, from, generation])
        openRelays.set(record, message)
        post(record, message)
      }
    }
  }

  function localMeta (topic, from, generation, host) {
    const meta = { topic, from, generation: generation === undefined ? null : generation }
    if (host !== undefined) meta.host = host
    return meta
  }

  // ---- gathers -----------------------------------------------------------

  /**
   * Ask every ready worker's handler; settle with `(answers, missing)` when
   * all have answered, exited, or the timeout passes.
   */
  function startGather (topic, payload, timeoutMs, from, generation, settle) {
    const id = nextGatherId++
    const state = { id, topic, pending: new Set(), answers: [], timer: null, settle }
    for (const record of records) {
      if (record.isReady()) state.pending.add(record)
    }
    if (state.pending.size === 0) {
      settle([], [])
      return
    }
    gathers.set(id, state)
    const message = busMessage.handlerAsk(id, topic, payload, from, generation)
    for (const record of Array.from(state.pending)) {
      if (reserveFor(record, topic, payload)) {
        post(record, message)
        continue
      }
      // Not asked (its queue is full): an error entry now, not a silent wait until the timeout.
      state.pending.delete(record)
      state.answers.push({
        w: record.id,
        p: record.pid,
        ok: false,
        e: { message: `worker ${record.id} (pid ${record.pid}) was not asked "${topic}": bus.maxQueuedBytes is already queued for it`, code: 'ERR_CLUSTERIZE_BUS_BACKPRESSURE' }
      })
    }
    if (state.pending.size === 0) {
      finishGather(state)
      return
    }
    state.timer = setTimeout(finishGather, timeoutMs, state)
  }

  function finishGather (state) {
    if (!gathers.has(state.id)) return
    gathers.delete(state.id)
    clearTimeout(state.timer)
    const missing = []
    for (const record of state.pending) missing.push(record.id)
    state.settle(state.answers, missing)
  }

  function gatherAnswer (record, message) {
    const state = gathers.get(message.id)
    if (state === undefined || !state.pending.has(record)) return
    state.pending.delete(record)
    const answer = { w: record.id, p: record.pid, ok: message.ok === true }
    if (answer.ok && core.acceptsPayload(message.d)) {
      answer.d = message.d
    } else if (answer.ok) {
      answer.ok = false
      answer.e = { message: `worker ${record.id} sent a malformed answer`, code: 'ERR_CLUSTERIZE_BUS_DECODE' }
    } else {
      answer.e = message.e && typeof message.e === 'object' ? message.e : { message: 'unknown error' }
    }
    state.answers.push(answer)
    if (state.pending.size === 0) finishGather(state)
  }

  // ---- messages from workers ------------------------------------------------

  function fromWorkerBroadcast (record, topic, payload) {
    relay(topic, payload, record.id, record.generation, undefined, record)
    core.deliver(topic, payload, localMeta(topic, record.id, record.generation))
    if (core.bridge) core.bridge.publish(topic, payload, record.id, record.generation)
  }

  /**
   * Handle one 'bus' envelope from a worker. Malformed envelopes are ignored.
   * @param {object} record
   * @param {object} message
   */
  function onWorkerMessage (record, message) {
    if (!record || !message || !FROM_WORKER.has(message.op)) {
      debug('ignoring bus envelope with op %o', message && message.op)
      return
    }
    if (message.op === BUS_OP.HANDLER_REPLY) {
      gatherAnswer(record, message)
      return
    }
    if (message.op === BUS_OP.BROADCASTS) {
      // Broadcasts a worker made in one tick: [topic, payload, topic, payload, ...]
      const items = message.m
      if (!Array.isArray(items) || items.length % 2 !== 0) return
      for (let i = 0; i < items.length; i += 2) {
        const topic = items[i]
        const payload = items[i + 1]
        if (isTopic(topic) && core.acceptsPayload(payload)) fromWorkerBroadcast(record, topic, payload)
      }
      return
    }
    const topic = message.t
    const payload = message.d
    // A raw request carries plain data for a library handler on a reserved topic; the codec does not apply.
    const rawRequest = message.op === BUS_OP.REQUEST && message.r === 1 && typeof topic === 'string' && topic.startsWith(RESERVED_PREFIX)
    if (!isTopic(topic) || (!rawRequest && !core.acceptsPayload(payload))) {
      debug('ignoring malformed bus envelope (op %s) from worker %s', message.op, record.id)
      return
    }
    switch (message.op) {
      case BUS_OP.BROADCAST: {
        fromWorkerBroadcast(record, topic, payload)
        return
      }
      case BUS_OP.SEND: {
        const to = message.to
        if (to === 'primary') {
          core.deliver(topic, payload, localMeta(topic, record.id, record.generation))
          return
        }
        if (typeof to !== 'number') return
        const target = recordForSlot(to)
        if (target === null) {
          debug('bus.send to worker %s on %s dropped: no live worker in that slot', to, topic)
          return
        }
        // Bounded like relays: a worker that does not read loses it (counted), the primary does not hold it.
        if (reserveFor(target, topic, payload)) post(target, busMessage.relay(topic, payload, record.id, record.generation))
        return
      }
      case BUS_OP.REQUEST: {
        const id = message.id
        if (typeof id !== 'number') return
        const raw = rawRequest
        core.invoke(topic, payload, localMeta(topic, record.id, record.generation), 'the primary', raw).then(function reply (answer) {
          // A worker that exited meanwhile gets nothing: its request died with it.
          if (!records.has(record)) return
          // Answers to library requests share one write per loop turn, as the requests do.
          post(record, busMessage.response(id, answer.ok, answer.d, answer.e, raw), raw)
        })
        return
      }
      case BUS_OP.GATHER: {
        const id = message.id
        const timeoutMs = message.ms
        if (typeof id !== 'number' || typeof timeoutMs !== 'number' || !(timeoutMs > 0)) return
        startGather(topic, payload, Math.min(timeoutMs, MAX_TIMER_MS), record.id, record.generation, function replyGather (answers, missing) {
          if (!records.has(record)) return
          post(record, busMessage.gatherResult(id, answers, missing))
        })
      }
    }
  }

  return {
    role: 'primary',

    addWorker (record) {
      if (!record || !record.channel || typeof record.channel.post !== 'function') {
        throw new TypeError('busAddWorker(record): record.channel must be an ipc.Channel')
      }
      if (typeof record.isReady !== 'function' || typeof record.isLive !== 'function') {
        throw new TypeError('busAddWorker(record): record must be a WorkerRecord')
      }
      records.add(record)
    },

    removeWorker (record) {
      if (!records.delete(record)) return
      openRelays.delete(record)
      for (const state of Array.from(gathers.values())) {
        if (!state.pending.has(record)) continue
        state.pending.delete(record)
        state.answers.push({
          w: record.id,
          p: record.pid,
          ok: false,
          e: { message: `worker ${record.id} (pid ${record.pid}) exited before answering "${state.topic}"`, code: 'ERR_CLUSTERIZE_WORKER_EXIT' }
        })
        if (state.pending.size === 0) finishGather(state)
      }
    },

    onWorkerMessage,

    /** @param {'host'|'remote'} [scope] 'host': not over Redis; 'remote': over Redis only */
    broadcast (topic, payload, self, scope) {
      if (scope !== 'remote') relay(topic, payload, 'primary', undefined, undefined, null)
      if (core.bridge && scope !== 'host') core.bridge.publish(topic, payload, 'primary', undefined)
      if (self && scope !== 'remote') process.nextTick(deliverLater, core, topic, payload, localMeta(topic, 'primary'))
    },

    send (to, topic, payload) {
      if (to === 'primary') {
        process.nextTick(deliverLater, core, topic, payload, localMeta(topic, 'primary'))
        return true
      }
      const target = recordForSlot(to)
      if (target === null || !reserveFor(target, topic, payload)) return false
      post(target, busMessage.relay(topic, payload, 'primary'))
      return true
    },

    request (topic, payload, timeoutMs, raw) {
      return core.invokeLocally(topic, payload, localMeta(topic, 'primary'), 'the primary', timeoutMs, 'bus.request', raw)
    },

    gather (topic, payload, timeoutMs) {
      return new Promise(function gatherFromPrimary (resolve) {
        startGather(topic, payload, timeoutMs, 'primary', undefined, function settle (answers, missing) {
          resolve(core.gatherResult(topic, answers, missing))
        })
      })
    },

    /** A broadcast that came over Redis from another host. */
    fromBridge (topic, payload, from, generation, host) {
      relay(topic, payload, from, generation, host, null)
      core.deliver(topic, payload, localMeta(topic, from, generation, host))
    },

    close () {
      for (const state of Array.from(gathers.values())) finishGather(state)
    },

    status () {
      let ready = 0
      for (const record of records) if (record.isReady()) ready++
      let queuedBytes = 0
      for (const record of records) queuedBytes += record.channel.queuedBytes
      return { workers: records.size, readyWorkers: ready, pendingGathers: gathers.size, queuedBytes, dropped: droppedTotal, maxQueuedBytes: core.codec.maxQueuedBytes }
    }
  }
}

module.exports = { createPrimaryTransport }
