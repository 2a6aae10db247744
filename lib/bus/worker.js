'use strict'

/**
 * The bus inside a worker: everything goes to the primary over the worker's
 * ipc.Channel (coalesced per tick), and comes back from it.
 */

const debug = require('debug')('clusterize:bus')
const { BUS_OP, bus: busMessage } = require('../protocol')
const { ClusterizeTimeoutError } = require('../errors')
const { ClusterizeBusError, errorFromWire } = require('./errors')
const { isTopic, deliverLater } = require('./core')
const { queuedSize } = require('./codec')

/** How long past its own timeout a gather waits for the primary's summary. */
const GATHER_GRACE_MS = 2000
/** The least time between two log lines about drops towards one worker. */
const DROP_LOG_EVERY_MS = 10000

/**
 * @param {import('./core').BusCore} core
 * @param {{ channel: import('../ipc').Channel, id: number, generation?: number }} options
 */
function createWorkerTransport (core, options) {
  const channel = options.channel
  /** This worker's slot id: -1 while it is a warm spare, its slot once promoted (setId). */
  let selfId = options.id
  const selfGeneration = options.generation === undefined ? null : options.generation
  /** @type {Map<number, { resolve: Function, reject: Function, timer: *, topic: string }>} */
  const pending = new Map()
  let nextId = 1
  const backpressure = { refused: 0 }
  /**
   * Bytes of this worker's broadcasts and sends that some receiver has not
   * taken yet: counted from the call until the primary's credit says every
   * receiver's channel handed them to the OS (lib/bus/flow.js). This, not
   * only the channel to the primary, is what bus.maxQueuedBytes bounds.
   */
  let inFlight = 0
  /** Messages of ours the primary dropped for stuck workers (it tells us). */
  let droppedTotal = 0
  /** @type {Map<number, number>} when a drop towards each worker was last logged */
  const lastDropLog = new Map()
  /** @type {Array<Function>} drained() callers */
  let drainWaiters = []
  let watchingChannel = false
  /** The 'B' envelope still queued in the channel: broadcasts of one tick share it. */
  let openBroadcasts = null

  /** @param {boolean} [batched] share one write per loop turn (see request()); otherwise at once when idle */
  function post (message, batched) {
    if (batched) channel.post(message)
    else channel.postSoon(message)
  }

  /**
   * Count a message towards what is queued to the primary; past
   * bus.maxQueuedBytes, refuse it: the primary or the channel cannot keep up,
   * and queueing more would only grow memory in both processes.
   */
  function reserve (method, topic, payload, extraBytes, relayed) {
    const bytes = queuedSize(topic, payload) + (extraBytes || 0)
    const queued = channel.queuedBytes + inFlight
    if (queued + bytes > core.codec.maxQueuedBytes) {
      backpressure.refused++
      throw new ClusterizeBusError(
        `${method}("${topic}"): ${queued} bytes are already queued towards the primary and the workers it relays to, over bus.maxQueuedBytes (${core.codec.maxQueuedBytes}): ` +
        'the primary, a receiving worker or the IPC channel cannot keep up. Nothing was sent: `await bus.drained()` and send it again, or raise bus.maxQueuedBytes.',
        'ERR_CLUSTERIZE_BUS_BACKPRESSURE', { topic, queuedBytes: queued, limit: core.codec.maxQueuedBytes })
    }
    // Relayed bytes stay counted until credited, which is after the channel wrote them: not twice.
    if (relayed) inFlight += bytes
    else channel.reserve(bytes)
    return bytes
  }

  function drainedBelow () {
    return Math.floor(core.codec.maxQueuedBytes / 2)
  }

  /** Resolve the drained() callers once there is room (or nothing will ever be written). */
  function checkDrained () {
    if (drainWaiters.length === 0) return
    const below = drainedBelow()
    if (!channel.connected || channel.queuedBytes + inFlight <= below) {
      const waiters = drainWaiters
      drainWaiters = []
      for (const resolve of waiters) resolve()
      return
    }
    // Credits wake us for inFlight; the channel's own queue wakes us here.
    if (!watchingChannel && channel.queuedBytes > 0) {
      watchingChannel = true
      channel.drained(Math.max(0, below - inFlight)).then(function channelDrained () {
        watchingChannel = false
        checkDrained()
      })
    }
  }

  function creditOf (bytes) {
    inFlight = bytes >= inFlight ? 0 : inFlight - bytes
    checkDrained()
  }

  function droppedFor (workerId, count, topic) {
    droppedTotal += count
    const now = Date.now()
    // One line per stuck episode, not one per message: at most one per worker per DROP_LOG_EVERY_MS.
    if (!(now - (lastDropLog.get(workerId) || 0) < DROP_LOG_EVERY_MS)) {
      lastDropLog.set(workerId, now)
      core.log.warn(`bus: the primary dropped ${count} of this worker's messages (topic "${topic}") to worker ${workerId}: that worker is stuck (it read nothing for bus.stallTimeoutMs)`, { workerId, topic })
    }
    core.reportDropped({ workerId, count, topic })
  }

  function track (kind, topic, timeoutMs, onTimeout) {
    const id = nextId++
    return {
      id,
      promise: new Promise(function register (resolve, reject) {
        const timer = setTimeout(function timedOut () {
          pending.delete(id)
          onTimeout(resolve, reject)
        }, timeoutMs)
        pending.set(id, { kind, resolve, reject, timer, topic })
      })
    }
  }

  function settle (id, kind) {
    const entry = pending.get(id)
    if (entry === undefined || entry.kind !== kind) return undefined
    pending.delete(id)
    clearTimeout(entry.timer)
    return entry
  }

  function failAll (reason) {
    checkDrained()
    for (const [id, entry] of Array.from(pending)) {
      pending.delete(id)
      clearTimeout(entry.timer)
      entry.reject(new ClusterizeBusError(`bus.${entry.kind}("${entry.topic}"): ${reason}`, 'ERR_CLUSTERIZE_BUS_CLOSED', { topic: entry.topic }))
    }
  }

  function selfMeta (topic) {
    return { topic, from: selfId, generation: selfGeneration }
  }

  /**
   * Handle one 'bus' envelope from the primary. Malformed envelopes are ignored.
   * @param {object} message
   */
  function onPrimaryMessage (message) {
    if (!message) return
    switch (message.op) {
      case BUS_OP.RELAYS: {
        // Relayed messages of one tick: [topic, payload, from, generation, ...]
        const items = message.m
        if (!Array.isArray(items) || items.length % 4 !== 0) return
        for (let i = 0; i < items.length; i += 4) {
          const topic = items[i]
          const payload = items[i + 1]
          if (!isTopic(topic) || !core.hasListeners(topic) || !core.acceptsPayload(payload)) continue
          const generation = items[i + 3]
          core.deliver(topic, payload, { topic, from: items[i + 2], generation: generation === undefined ? null : generation })
        }
        return
      }
      case BUS_OP.RELAY: {
        if (!isTopic(message.t) || !core.acceptsPayload(message.d)) return
        const meta = { topic: message.t, from: message.f, generation: message.g === undefined ? null : message.g }
        if (message.h !== undefined) meta.host = message.h
        core.deliver(message.t, message.d, meta)
        return
      }
      case BUS_OP.RESPONSE: {
        const entry = settle(message.id, 'request')
        if (entry === undefined) return
        if (message.ok === true) {
          let value
          try {
            value = core.codec.decode(message.d)
          } catch (err) {
            entry.reject(new ClusterizeBusError(`bus.request("${entry.topic}"): could not decode the answer: ${err.message}`, 'ERR_CLUSTERIZE_BUS_DECODE'))
            return
          }
          entry.resolve(value)
        } else {
          entry.reject(errorFromWire(message.e, `the handler for "${entry.topic}" failed`))
        }
        return
      }
      case BUS_OP.GATHER_RESULT: {
        const entry = settle(message.id, 'gather')
        if (entry === undefined) return
        entry.resolve(core.gatherResult(entry.topic, Array.isArray(message.r) ? message.r : [], Array.isArray(message.m) ? message.m : []))
        return
      }
      case BUS_OP.CREDIT: {
        if (typeof message.n === 'number' && message.n > 0) creditOf(message.n)
        return
      }
      case BUS_OP.DROPPED: {
        if (typeof message.w === 'number' && typeof message.n === 'number' && message.n > 0 && isTopic(message.t)) droppedFor(message.w, message.n, message.t)
        return
      }
      case BUS_OP.HANDLER_ASK: {
        const id = message.id
        if (typeof id !== 'number' || !isTopic(message.t) || !core.acceptsPayload(message.d)) return
        const meta = { topic: message.t, from: message.f, generation: message.g === undefined ? null : message.g }
        core.invoke(message.t, message.d, meta, `worker ${selfId}`).then(function answer (reply) {
          post(busMessage.handlerReply(id, reply.ok, reply.d, reply.e))
        })
        return
      }
      default:
        debug('ignoring bus envelope with op %o', message.op)
    }
  }

  return {
    role: 'worker',
    get id () { return selfId },
    generation: selfGeneration,
    onPrimaryMessage,
    failAll,

    /** A warm spare was promoted: its own messages now name its slot. */
    setId (id) {
      selfId = id
    },

    broadcast (topic, payload, self) {
      const bytes = reserve('bus.broadcast', topic, payload, 0, true)
      if (openBroadcasts !== null && channel.lastQueued() === openBroadcasts) {
        openBroadcasts.m.push(topic, payload)
        openBroadcasts.n += bytes
      } else {
        openBroadcasts = busMessage.broadcasts([topic, payload], bytes)
        post(openBroadcasts)
      }
      if (self) process.nextTick(deliverLater, core, topic, payload, selfMeta(topic))
    },

    send (to, topic, payload) {
      const bytes = reserve('bus.send', topic, payload, 0, to !== 'primary')
      post(busMessage.send(to, topic, payload, to === 'primary' ? undefined : bytes))
      return true
    },

    request (topic, payload, timeoutMs) {
      reserve('bus.request', topic, payload)
      const { id, promise } = track('request', topic, timeoutMs, function requestTimedOut (resolve, reject) {
        reject(new ClusterizeTimeoutError(`bus.request("${topic}"): the primary did not answer within ${timeoutMs} ms (options.timeoutMs)`))
      })
      post(busMessage.request(id, topic, payload))
      return promise
    },

    gather (topic, payload, timeoutMs) {
      reserve('bus.gather', topic, payload)
      const { id, promise } = track('gather', topic, timeoutMs + GATHER_GRACE_MS, function gatherLost (resolve, reject) {
        reject(new ClusterizeTimeoutError(`bus.gather("${topic}"): the primary did not return the answers within ${timeoutMs} ms (+${GATHER_GRACE_MS} ms grace)`))
      })
      post(busMessage.gather(id, topic, payload, timeoutMs))
      return promise
    },

    close () {
      failAll('the bus was closed')
    },

    /**
     * Resolves once what this worker has queued towards the primary and not
     * yet taken by every receiver is back under half of bus.maxQueuedBytes.
     */
    drained () {
      return new Promise(function waitForRoom (resolve) {
        drainWaiters.push(resolve)
        checkDrained()
      })
    },

    status () {
      return { id: selfId, generation: selfGeneration, pending: pending.size, connected: channel.connected, queuedBytes: channel.queuedBytes + inFlight, inFlightBytes: inFlight, refused: backpressure.refused, dropped: droppedTotal }
    }
  }
}

module.exports = { createWorkerTransport }
