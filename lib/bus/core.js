'use strict'

/**
 * The process-local half of the bus: topics and listeners, request handlers,
 * payload checks and the helpers every transport (primary, worker, local)
 * shares. Transports decide where a message goes; this file decides what
 * happens when one arrives.
 */

const debug = require('debug')('clusterize:bus')
const { ClusterizeTimeoutError, MAX_TIMER_MS: MAX_TIMEOUT_MS } = require('../errors')
const { ClusterizeBusError, errorFromWire, errorToWire } = require('./errors')
const { createCodec, checkTopic, MAX_TOPIC_LENGTH } = require('./codec')

const DEFAULT_TIMEOUT_MS = 5000

const NULL_LOG = { info () {}, warn () {}, error () {}, debug () {} }

/**
 * Accept a logger with `info/warn/error/debug(msg, fields)`; missing levels are no-ops.
 * @param {*} logger
 */
function wrapLogger (logger) {
  if (!logger || typeof logger !== 'object') return NULL_LOG
  const wrapped = {}
  for (const level of ['info', 'warn', 'error', 'debug']) {
    wrapped[level] = typeof logger[level] === 'function'
      ? function log (msg, fields) {
        try { logger[level](msg, fields) } catch (err) { debug('logger threw: %s', err.message) }
      }
      : NULL_LOG[level]
  }
  return wrapped
}

/** Is this a topic string we accept off the wire? (no throw) */
function isTopic (topic) {
  return typeof topic === 'string' && topic.length > 0 && topic.length <= MAX_TOPIC_LENGTH
}

/**
 * Resolve and check a `timeoutMs` option.
 * @param {*} options
 * @param {string} method
 * @returns {number}
 */
function timeoutOf (options, method) {
  const value = options && options.timeoutMs !== undefined ? options.timeoutMs : DEFAULT_TIMEOUT_MS
  if (typeof value !== 'number' || !(value > 0) || value > MAX_TIMEOUT_MS) {
    throw new ClusterizeBusError(`${method}: options.timeoutMs must be a number of milliseconds from 1 to ${MAX_TIMEOUT_MS}, got ${String(value)}`,
      'ERR_CLUSTERIZE_BUS_OPTION')
  }
  return Math.ceil(value)
}

class BusCore {
  constructor () {
    /** @type {Map<string, Array<{ fn: Function, once: boolean }>>} */
    this.listeners = new Map()
    /** @type {Map<string, Function>} */
    this.handlers = new Map()
    this.codec = createCodec()
    this.log = NULL_LOG
    /** Set by index.js: the primary, worker or local transport, or null. */
    this.transport = null
    /** Set by index.js when the Redis bridge runs in this process. */
    this.bridge = null
    this.warned = new Set()
    /** bus.stallTimeoutMs: how long a receiver may read nothing before it counts as stuck (primary). */
    this.stallTimeoutMs = 5000
    /** @type {Array<Function>} bus.onDropped() handlers */
    this.dropHandlers = []
  }

  /**
   * Tell the bus.onDropped() handlers that messages of this process were
   * dropped. A handler that throws is logged, never breaks the bus.
   * @param {{ workerId: number, count: number, topic: string }} info
   */
  reportDropped (info) {
    const handlers = this.dropHandlers.slice()
    for (let i = 0; i < handlers.length; i++) {
      try {
        handlers[i](Object.assign({}, info))
      } catch (err) {
        this.log.error(`bus: an onDropped handler threw: ${err && err.message}`, { err })
      }
    }
  }

  // ---- listeners --------------------------------------------------------

  addListener (topic, fn, once, method) {
    checkTopic(topic, method)
    if (typeof fn !== 'function') {
      throw new ClusterizeBusError(`${method}("${topic}", handler): handler must be a function, got ${typeof fn}`, 'ERR_CLUSTERIZE_BUS_HANDLER')
    }
    let list = this.listeners.get(topic)
    if (!list) {
      list = []
      this.listeners.set(topic, list)
    }
    list.push({ fn, once })
  }

  removeListener (topic, fn) {
    const list = this.listeners.get(topic)
    if (!list) return
    if (fn === undefined) {
      this.listeners.delete(topic)
      return
    }
    for (let i = list.length - 1; i >= 0; i--) {
      if (list[i].fn === fn) {
        list.splice(i, 1)
        break
      }
    }
    if (list.length === 0) this.listeners.delete(topic)
  }

  hasListeners (topic) {
    return this.listeners.has(topic)
  }

  /**
   * Decode once and call every listener of `topic` with `(data, meta)`.
   * A listener that throws or rejects is logged; it never breaks delivery to
   * the others nor the process.
   * @param {string} topic
   * @param {*} payload encoded data
   * @param {object} meta
   * @returns {number} listeners called
   */
  deliver (topic, payload, meta) {
    const list = this.listeners.get(topic)
    if (list === undefined) return 0
    let data
    try {
      data = this.codec.decode(payload)
    } catch (err) {
      debug('dropping undecodable message on %s: %s', topic, err.message)
      return 0
    }
    const snapshot = list.length === 1 ? [list[0]] : list.slice()
    for (let i = 0; i < snapshot.length; i++) {
      const entry = snapshot[i]
      if (entry.once) this.removeEntry(topic, entry)
      this.callListener(entry.fn, data, meta)
    }
    return snapshot.length
  }

  removeEntry (topic, entry) {
    const list = this.listeners.get(topic)
    if (!list) return
    const index = list.indexOf(entry)
    if (index !== -1) list.splice(index, 1)
    if (list.length === 0) this.listeners.delete(topic)
  }

  callListener (fn, data, meta) {
    try {
      const result = fn(data, meta)
      if (result && typeof result.then === 'function') {
        result.then(undefined, (err) => this.listenerFailed(meta, err))
      }
    } catch (err) {
      this.listenerFailed(meta, err)
    }
  }

  listenerFailed (meta, err) {
    this.log.error(`bus: a listener for topic "${meta.topic}" threw: ${err && err.message}`, { topic: meta.topic, from: meta.from, err })
  }

  // ---- request handlers ---------------------------------------------------

  setHandler (topic, fn) {
    checkTopic(topic, 'bus.handle')
    if (typeof fn !== 'function') {
      throw new ClusterizeBusError(`bus.handle("${topic}", fn): fn must be a function, got ${typeof fn}`, 'ERR_CLUSTERIZE_BUS_HANDLER')
    }
    if (this.handlers.has(topic)) {
      throw new ClusterizeBusError(`bus.handle("${topic}"): this process already has a handler for that topic (one per topic per process; call the function bus.handle returned to remove it first)`,
        'ERR_CLUSTERIZE_BUS_HANDLER_EXISTS', { topic })
    }
    this.handlers.set(topic, fn)
    const handlers = this.handlers
    return function removeHandler () {
      if (handlers.get(topic) === fn) handlers.delete(topic)
    }
  }

  /**
   * Run this process's handler for `topic` and encode its answer.
   * Never rejects: resolves `{ ok: true, d }` or `{ ok: false, e }` (wire forms).
   * @param {string} topic
   * @param {*} payload encoded request data
   * @param {object} meta
   * @param {string} where 'the primary' or 'worker N', for the no-handler message
   * @returns {Promise<{ ok: boolean, d?: *, e?: object }>}
   */
  invoke (topic, payload, meta, where) {
    const fn = this.handlers.get(topic)
    if (fn === undefined) {
      return Promise.resolve({
        ok: false,
        e: { message: `bus: no handler for topic "${topic}" in ${where} (register one there with bus.handle("${topic}", fn))`, code: 'ERR_CLUSTERIZE_BUS_NO_HANDLER' }
      })
    }
    const codec = this.codec
    return new Promise(function runHandler (resolve) {
      resolve(fn(codec.decode(payload), meta))
    }).then(function encodeAnswer (result) {
      try {
        return { ok: true, d: codec.encode(topic, result, 'reply') }
      } catch (err) {
        return { ok: false, e: errorToWire(err) }
      }
    }, function handlerFailed (err) {
      return { ok: false, e: errorToWire(err) }
    })
  }

  /**
   * Invoke the local handler with a timeout and decode its answer: request()
   * in the primary and in single-process mode.
   */
  invokeLocally (topic, payload, meta, where, timeoutMs, method) {
    const codec = this.codec
    return withTimeout(this.invoke(topic, payload, meta, where), timeoutMs,
      () => new ClusterizeTimeoutError(`${method}("${topic}"): the handler in ${where} did not answer within ${timeoutMs} ms (options.timeoutMs)`))
      .then(function settle (answer) {
        if (!answer.ok) throw errorFromWire(answer.e, `the handler for "${topic}" failed`)
        return codec.decode(answer.d)
      })
  }

  /**
   * Turn wire answers `[{ w, p, ok, d | e }]` and missing ids into the public
   * gather result: an array of `{ workerId, pid, result }` / `{ workerId, pid, error }`
   * sorted by workerId, with a `missing` property (ids that did not answer in time).
   */
  gatherResult (topic, answers, missing) {
    const out = []
    for (const answer of answers) {
      if (!answer || typeof answer !== 'object') continue
      const entry = { workerId: answer.w, pid: answer.p }
      if (answer.ok) {
        try {
          entry.result = this.codec.decode(answer.d)
        } catch (err) {
          entry.error = new ClusterizeBusError(`bus.gather("${topic}"): could not decode the answer of worker ${answer.w}: ${err.message}`, 'ERR_CLUSTERIZE_BUS_DECODE')
        }
      } else {
        entry.error = errorFromWire(answer.e, `worker ${answer.w} failed to answer "${topic}"`)
      }
      out.push(entry)
    }
    out.sort(byWorkerId)
    out.missing = Array.isArray(missing) ? missing.filter((id) => id !== undefined).sort(compareIds) : []
    return out
  }

  /**
   * Is `payload` something this process's codec can decode? Warns once about
   * the classic mis-configuration (advanced bus over a JSON IPC channel).
   */
  acceptsPayload (payload) {
    if (!this.codec.isPayload(payload)) return false
    if (payload && typeof payload === 'object' && payload.type === 'Buffer' && !Buffer.isBuffer(payload)) {
      this.warnOnce('json-channel', "bus: bus.serialization is 'advanced' but the IPC channel is JSON; set cluster.setupPrimary({ serialization: 'advanced' }) (clusterize does this from bus.serialization). Messages still arrive, slowly.")
    }
    return true
  }

  warnOnce (key, message, fields) {
    if (this.warned.has(key)) return
    this.warned.add(key)
    this.log.warn(message, fields)
  }
}

function byWorkerId (a, b) {
  return compareIds(a.workerId, b.workerId) || ((a.pid || 0) - (b.pid || 0))
}

function compareIds (a, b) {
  if (typeof a === 'number' && typeof b === 'number') return a - b
  return String(a).localeCompare(String(b))
}

/**
 * Race a promise against a timer. The timer is not unref'd: a pending request
 * keeps a script alive until it is answered or times out.
 */
function withTimeout (promise, timeoutMs, makeError) {
  return new Promise(function race (resolve, reject) {
    const timer = setTimeout(function timedOut () { reject(makeError()) }, timeoutMs)
    promise.then(function done (value) {
      clearTimeout(timer)
      resolve(value)
    }, function failed (err) {
      clearTimeout(timer)
      reject(err)
    })
  })
}

/** Deliver on a later tick (process.nextTick(deliverLater, core, ...)): a sender's own listeners never run inside its call. */
function deliverLater (core, topic, payload, meta) {
  core.deliver(topic, payload, meta)
}

module.exports = { BusCore, wrapLogger, isTopic, timeoutOf, withTimeout, deliverLater, DEFAULT_TIMEOUT_MS, NULL_LOG }
