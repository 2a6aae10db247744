'use strict'

/**
 * The one IPC envelope all internal traffic uses: `{ $cz: 1, kind, ...fields }`.
 *
 * Everything clusterize says between the primary and its workers goes through
 * this module. Messages written in the same tick to the same peer are coalesced
 * into one `batch` envelope, so a burst of small messages costs one IPC write
 * and one JSON encode instead of one per message. Messages that are not
 * envelopes (the user's own `process.send` traffic) are never touched.
 */

const debug = require('debug')('clusterize:ipc')

const MARK = '$cz'
const BATCH = 'batch'

/**
 * Is this a clusterize envelope?
 * @param {*} message
 * @returns {boolean}
 */
function isEnvelope (message) {
  return message !== null &&
    typeof message === 'object' &&
    message[MARK] === 1 &&
    typeof message.kind === 'string'
}

/**
 * Build an envelope of the given kind.
 * @param {string} kind
 * @param {object} [fields]
 * @returns {object}
 */
function envelope (kind, fields) {
  const message = { [MARK]: 1, kind }
  if (fields) {
    for (const key of Object.keys(fields)) message[key] = fields[key]
  }
  return message
}

/**
 * A writer to one peer: `process` inside a worker, a cluster `Worker` in the primary.
 * `post()` queues and flushes once per tick; `postNow()` writes at once (needed
 * when a handle travels with the message).
 */
class Channel {
  /**
   * @param {{ send: Function, isConnected?: Function, connected?: boolean }} peer
   */
  constructor (peer) {
    this.peer = peer
    this.queue = []
    /** Callbacks of queued messages that asked to know when they are written (post's onWritten). */
    this.writtenCallbacks = []
    /** Payload bytes queued here (not yet written), as reserved by callers. */
    this.pendingBytes = 0
    /** Payload bytes written but not yet taken by the OS (the peer reads slowly). */
    this.writingBytes = 0
    /** @type {Array<{ below: number, resolve: Function }>} drained() callers */
    this.drainWaiters = []
    this.scheduled = false
    this.urgent = false
    /** Writes handed to the peer whose completion has not been reported yet. */
    this.outstanding = 0
    /**
     * Running totals of reserved bytes and of those the OS has taken. Writes
     * complete in order, so a caller that notes reservedTotal right after its
     * reserve() knows its message is out once writtenTotal reaches that mark.
     */
    this.reservedTotal = 0
    this.writtenTotal = 0
    /** @type {Function|null} called after a write of reserved bytes completes (the bus's flow control) */
    this.onWritten = null
    this.flush = this.flush.bind(this)
    this.flushUrgent = this.flushUrgent.bind(this)
  }

  get connected () {
    const peer = this.peer
    if (typeof peer.isConnected === 'function') return peer.isConnected()
    return peer.connected === true
  }

  /**
   * Queue an envelope; it is written with everything else posted this tick.
   * @param {object} message an envelope
   * @param {(err: Error|null) => void} [onWritten] called once the write that carries it has
   *   completed (the OS holds it: it reaches the peer even if this process dies now), or with
   *   the error that kept it from being written
   */
  post (message, onWritten) {
    this.queue.push(message)
    if (onWritten !== undefined) this.writtenCallbacks.push(onWritten)
    if (!this.scheduled) {
      this.scheduled = true
      setImmediate(this.flush)
    }
  }

  /**
   * Write at once when the channel is idle (nothing queued, no write
   * outstanding): a lone message never waits for a batch. Otherwise queue it
   * and write the batch once the current job and its microtasks are done, so
   * a burst still goes out as few writes, a loop turn sooner than post().
   * @param {object} message an envelope
   */
  postSoon (message) {
    if (this.queue.length === 0 && this.outstanding === 0 && !this.urgent) {
      const bytes = this.pendingBytes
      this.pendingBytes = 0
      this.write(message, undefined, undefined, bytes)
      return
    }
    this.queue.push(message)
    if (!this.urgent) {
      this.urgent = true
      queueMicrotask(this.flushUrgent)
    }
  }

  /**
   * The envelope posted last, while it is still queued (not written): callers
   * may append items to it without reordering anything.
   * @returns {object|undefined}
   */
  lastQueued () {
    return this.queue.length > 0 ? this.queue[this.queue.length - 1] : undefined
  }

  flushUrgent () {
    this.urgent = false
    this.flush()
  }

  /**
   * Write now, keeping order with anything already queued.
   * @param {object} message
   * @param {*} [handle] a net.Socket or server handle to pass along
   * @param {Function} [callback]
   * @returns {boolean} false when the channel is closed
   */
  postNow (message, handle, callback) {
    if (this.queue.length > 0) this.flush()
    return this.write(message, handle, callback)
  }

  /**
   * Count `bytes` of payload towards what is queued to this peer until it is
   * written and taken by the OS (see queuedBytes).
   * @param {number} bytes
   */
  reserve (bytes) {
    this.pendingBytes += bytes
    this.reservedTotal += bytes
  }

  /** Payload bytes reserved and not yet taken by the OS: what a slow peer makes us hold. */
  get queuedBytes () {
    return this.pendingBytes + this.writingBytes
  }

  /**
   * Resolve once queuedBytes is at most `below` (at once if it already is),
   * or once the channel closes (nothing will ever be written then).
   * @param {number} below
   * @returns {Promise<void>}
   */
  drained (below) {
    if (this.queuedBytes <= below || !this.connected) return Promise.resolve()
    return new Promise((resolve) => { this.drainWaiters.push({ below, resolve }) })
  }

  /** Wake drained() callers whose threshold is now met (after a write completed). */
  wakeDrainWaiters () {
    if (this.drainWaiters.length === 0) return
    const closed = !this.connected
    const still = []
    for (const waiter of this.drainWaiters) {
      if (closed || this.queuedBytes <= waiter.below) waiter.resolve()
      else still.push(waiter)
    }
    this.drainWaiters = still
  }

  flush () {
    this.scheduled = false
    const queue = this.queue
    if (queue.length === 0) return
    this.queue = []
    const bytes = this.pendingBytes
    this.pendingBytes = 0
    let callback
    if (this.writtenCallbacks.length > 0) {
      const callbacks = this.writtenCallbacks
      this.writtenCallbacks = []
      callback = function batchWritten (err) {
        if (err) debug('async send error: %s', err.message)
        for (const onWritten of callbacks) onWritten(err || null)
      }
    }
    this.write(queue.length === 1 ? queue[0] : envelope(BATCH, { items: queue }), undefined, callback, bytes)
  }

  write (message, handle, callback, bytes) {
    const written = bytes > 0 ? bytes : 0
    this.writingBytes += written
    this.outstanding++
    const done = callback
    callback = (err) => {
      this.outstanding--
      this.writingBytes -= written
      if (written > 0) {
        this.writtenTotal += written
        this.wakeDrainWaiters()
        if (this.onWritten !== null) this.onWritten(this)
      }
      if (done) done(err)
      else swallowSendError(err)
    }
    if (!this.connected) {
      debug('dropping %s: channel closed', message.kind)
      if (callback) process.nextTick(callback, new Error('IPC channel closed'))
      return false
    }
    try {
      if (handle !== undefined) {
        this.peer.send(message, handle, callback)
      } else {
        this.peer.send(message, callback || swallowSendError)
      }
      return true
    } catch (err) {
      // send() throws synchronously for unserialisable payloads and closed channels;
      // a broken peer must not take this process down.
      debug('send failed: %s', err.message)
      if (callback) process.nextTick(callback, err)
      return false
    }
  }
}

function swallowSendError (err) {
  if (err) debug('async send error: %s', err.message)
}

/**
 * Call `onEnvelope(message, handle)` for every clusterize envelope the peer sends,
 * unpacking batches. Foreign messages are ignored; a throwing handler is logged,
 * never allowed to crash the process.
 *
 * @param {import('events').EventEmitter} peer process or cluster Worker
 * @param {(message: object, handle?: *) => void} onEnvelope
 * @returns {() => void} stops listening
 */
function listen (peer, onEnvelope) {
  function onMessage (message, handle) {
    if (!isEnvelope(message)) return
    if (message.kind === BATCH) {
      const items = message.items
      if (!Array.isArray(items)) return
      for (let i = 0; i < items.length; i++) {
        if (isEnvelope(items[i])) dispatch(items[i])
      }
      return
    }
    dispatch(message, handle)
  }
  function dispatch (message, handle) {
    try {
      onEnvelope(message, handle)
    } catch (err) {
      debug('handler for %s threw: %s', message.kind, err && err.stack)
    }
  }
  peer.on('message', onMessage)
  return function stopListening () {
    peer.removeListener('message', onMessage)
  }
}

module.exports = { isEnvelope, envelope, listen, Channel, MARK }
