'use strict'

/**
 * The bus inside the primary: a relay between workers, the home of request
 * handlers, the coordinator of gathers, and (through the bridge) the link to
 * other hosts.
 *
 * Payloads arrive already encoded by the sender and are relayed as they are:
 * one relay envelope per message, posted to every recipient's ipc.Channel,
 * which coalesces everything posted in a tick into one IPC write per worker.
 * What is relayed stays on the sending worker's account until every
 * recipient's channel took it (./flow.js): the sender is slowed down, the
 * recipient loses nothing, and only a stuck recipient costs (reported) drops.
 */

const debug = require('debug')('clusterize:bus')
const { BUS_OP, bus: busMessage } = require('../protocol')
const { isTopic, deliverLater } = require('./core')
const { queuedSize } = require('./codec')
const { MAX_TIMER_MS } = require('../errors')
const { createFlow } = require('./flow')
const { createGathers } = require('./gather')
const { createNotices } = require('./notices')


/** Envelopes a worker may send; anything else is ignored. */
const FROM_WORKER = new Set([BUS_OP.BROADCAST, BUS_OP.BROADCASTS, BUS_OP.SEND, BUS_OP.REQUEST, BUS_OP.GATHER, BUS_OP.HANDLER_REPLY])

/**
 * @param {import('./core').BusCore} core
 */
function createPrimaryTransport (core) {
  /** @type {Set<import('../primary/worker-record').WorkerRecord>} as given by busAddWorker */
  const records = new Set()
  /** @type {Map<object, object>} per worker: the 'M' envelope still queued in its channel */
  const openRelays = new Map()
  /** Messages not relayed to a worker because it was stuck or too much was already queued for it. */
  let droppedTotal = 0
  /** Workers currently losing messages (logged once per episode). */
  const dropping = new WeakSet()
  const notices = createNotices({ records, post: (record, message) => post(record, message) })

  const flow = createFlow({
    stallTimeoutMs: () => core.stallTimeoutMs,
    onCredit: notices.credit,
    onStuck: function stuck (record, heldBytes) {
      dropping.add(record)
      core.log.warn(`bus: worker ${record.id} is stuck: it has read none of the ${heldBytes} bytes queued for it for ${core.stallTimeoutMs} ms (bus.stallTimeoutMs); ` +
        'dropping messages to it until it reads again (their senders are told)', { pid: record.pid })
    },
    onRecovered: function recovered (record) {
      if (!dropping.has(record)) return
      dropping.delete(record)
      core.log.info(`bus: worker ${record.id} reads its messages again`, { pid: record.pid })
    }
  })

  const gathers = createGathers({
    core,
    records,
    isTarget: (record) => record.isReady(),
    isStuck: (record) => flow.isStuck(record),
    post: (record, message) => post(record, message),
    onSkipped: () => { droppedTotal++ }
  })

  function drop (record, batch, topic, why) {
    droppedTotal++
    // Its sender is told (a message of the primary's own or the bridge's has none).
    if (batch !== null) notices.dropped(batch.origin, record, topic)
    if (!dropping.has(record)) {
      dropping.add(record)
      core.log.warn(`bus: dropping messages to worker ${record.id}: ${why}`, { pid: record.pid })
    }
  }

  /**
   * Admit one message for `record` and count it: on its sender's account
   * (`batch`; the sender is slowed down by credits, see flow.js), or, for the
   * primary's and the bridge's own messages (no sender to slow down), against
   * bus.maxQueuedBytes per worker. A stuck worker loses the message (counted,
   * reported to its sender).
   * @returns {boolean} false when the message must be dropped for this worker
   */
  function admit (record, topic, payload, batch) {
    if (flow.isStuck(record)) {
      drop(record, batch, topic, `it is stuck (it read nothing for bus.stallTimeoutMs, ${core.stallTimeoutMs} ms)`)
      return false
    }
    const bytes = queuedSize(topic, payload)
    const limit = core.codec.maxQueuedBytes
    // Honest senders keep a receiver under one budget each; past that a worker bypassed its own
    // accounting (raw process.send): the primary still bounds its memory itself.
    if (record.channel.queuedBytes + bytes > limit * (records.size + 1)) {
      drop(record, batch, topic, `over ${limit * (records.size + 1)} bytes are queued for it (bus.maxQueuedBytes per process)`)
      return false
    }
    if (batch === null) {
      const own = flow.ownBytes(record)
      if (own + bytes > limit) {
        drop(record, null, topic, `over ${limit} bytes of the primary's own and bridged messages are queued for it (bus.maxQueuedBytes); it is not reading fast enough`)
        return false
      }
    }
    // The episode is over (the next drop logs again); a stuck worker's ends in onRecovered.
    if (dropping.has(record) && record.channel.queuedBytes < limit / 2) dropping.delete(record)
    record.channel.reserve(bytes)
    flow.charge(record, batch, bytes)
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
   * @param {object|null} batch the worker sender's batch (flow.js), null for the primary's own
   */
  function relay (topic, payload, from, generation, host, except, batch) {
    if (host !== undefined) {
      const message = busMessage.relay(topic, payload, from, generation, host)
      for (const record of records) {
        if (record !== except && admit(record, topic, payload, null)) post(record, message)
      }
      return
    }
    for (const record of records) {
      if (record === except) continue
      if (!admit(record, topic, payload, batch)) continue
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

  // ---- messages from workers ------------------------------------------------

  function fromWorkerBroadcast (record, topic, payload, batch) {
    relay(topic, payload, record.id, record.generation, undefined, record, batch)
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
      gathers.answer(record, message)
      return
    }
    if (message.op === BUS_OP.BROADCASTS) {
      // Broadcasts a worker made in one tick: [topic, payload, topic, payload, ...]
      const items = message.m
      // Credited even when malformed: the sender counted it.
      const batch = flow.openBatch(record, message.n)
      if (Array.isArray(items) && items.length % 2 === 0) {
        for (let i = 0; i < items.length; i += 2) {
          const topic = items[i]
          const payload = items[i + 1]
          if (isTopic(topic) && core.acceptsPayload(payload)) fromWorkerBroadcast(record, topic, payload, batch)
        }
      }
      flow.closeBatch(batch)
      return
    }
    const topic = message.t
    const payload = message.d
    const relayed = message.op === BUS_OP.BROADCAST || message.op === BUS_OP.SEND
    const batch = relayed ? flow.openBatch(record, message.n) : null
    try {
      if (!isTopic(topic) || !core.acceptsPayload(payload)) {
        debug('ignoring malformed bus envelope (op %s) from worker %s', message.op, record.id)
        return
      }
      if (message.op === BUS_OP.BROADCAST) fromWorkerBroadcast(record, topic, payload, batch)
      else if (message.op === BUS_OP.SEND) fromWorkerSend(record, message.to, topic, payload, batch)
      else fromWorkerAsk(record, message, topic, payload)
    } finally {
      if (batch !== null) flow.closeBatch(batch)
    }
  }

  function fromWorkerSend (record, to, topic, payload, batch) {
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
    // On the sender's account like broadcasts: a stuck worker loses it (counted, reported).
    if (admit(target, topic, payload, batch)) post(target, busMessage.relay(topic, payload, record.id, record.generation))
  }

  /** REQUEST and GATHER from a worker. */
  function fromWorkerAsk (record, message, topic, payload) {
    switch (message.op) {
      case BUS_OP.REQUEST: {
        const id = message.id
        if (typeof id !== 'number') return
        core.invoke(topic, payload, localMeta(topic, record.id, record.generation), 'the primary').then(function reply (answer) {
          // A worker that exited meanwhile gets nothing: its request died with it.
          if (!records.has(record)) return
          post(record, busMessage.response(id, answer.ok, answer.d, answer.e))
        })
        return
      }
      case BUS_OP.GATHER: {
        const id = message.id
        const timeoutMs = message.ms
        if (typeof id !== 'number' || typeof timeoutMs !== 'number' || !(timeoutMs > 0)) return
        gathers.start(topic, payload, Math.min(timeoutMs, MAX_TIMER_MS), record.id, record.generation, function replyGather (answers, missing) {
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
      notices.forget(record)
      flow.forget(record)
      gathers.workerExited(record)
    },

    onWorkerMessage,

    /** @param {'host'|'remote'} [scope] 'host': not over Redis; 'remote': over Redis only */
    broadcast (topic, payload, self, scope) {
      if (scope !== 'remote') relay(topic, payload, 'primary', undefined, undefined, null, null)
      if (core.bridge && scope !== 'host') core.bridge.publish(topic, payload, 'primary', undefined)
      if (self && scope !== 'remote') process.nextTick(deliverLater, core, topic, payload, localMeta(topic, 'primary'))
    },

    send (to, topic, payload) {
      if (to === 'primary') {
        process.nextTick(deliverLater, core, topic, payload, localMeta(topic, 'primary'))
        return true
      }
      const target = recordForSlot(to)
      if (target === null || !admit(target, topic, payload, null)) return false
      post(target, busMessage.relay(topic, payload, 'primary'))
      return true
    },

    request (topic, payload, timeoutMs) {
      return core.invokeLocally(topic, payload, localMeta(topic, 'primary'), 'the primary', timeoutMs, 'bus.request')
    },

    gather (topic, payload, timeoutMs) {
      return new Promise(function gatherFromPrimary (resolve) {
        gathers.start(topic, payload, timeoutMs, 'primary', undefined, function settle (answers, missing) {
          resolve(core.gatherResult(topic, answers, missing))
        })
      })
    },

    /** A broadcast that came over Redis from another host. */
    fromBridge (topic, payload, from, generation, host) {
      relay(topic, payload, from, generation, host, null, null)
      core.deliver(topic, payload, localMeta(topic, from, generation, host))
    },

    close () {
      flow.close()
      gathers.close()
    },

    status () {
      let ready = 0
      for (const record of records) if (record.isReady()) ready++
      let queuedBytes = 0
      for (const record of records) queuedBytes += record.channel.queuedBytes
      return { workers: records.size, readyWorkers: ready, pendingGathers: gathers.size, queuedBytes, dropped: droppedTotal, stuckWorkers: flow.stuckCount(), maxQueuedBytes: core.codec.maxQueuedBytes }
    }
  }
}

module.exports = { createPrimaryTransport }
