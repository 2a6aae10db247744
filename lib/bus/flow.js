'use strict'

/**
 * Flow control in the primary: what it holds queued towards each worker, and
 * on whose behalf.
 *
 * A worker's broadcasts and sends are relayed into other workers' channels.
 * The sender's own channel empties as soon as the primary reads it, so
 * backpressure that stopped there let a fast sender fill the primary's queue
 * towards a slower (but live) receiver. Here every relayed message stays on
 * its sender's account until every receiver's channel has handed it to the
 * OS; then the sender gets the bytes back as credit (see primary.js). A
 * sender therefore never has more than bus.maxQueuedBytes in flight anywhere.
 *
 * A receiver that takes nothing for bus.stallTimeoutMs while bytes wait for
 * it is stuck (a blocked event loop): its holdings are credited back to their
 * senders at once, so one stuck worker cannot stall every sender, and the
 * primary drops messages to it (the caller reports them) until it reads again.
 */

const debug = require('debug')('clusterize:bus')

/**
 * @typedef {object} Batch messages of one envelope from one sender, credited together
 * @property {*} origin the sender's record
 * @property {number} credit bytes the sender counted for them
 * @property {number} remaining ledger entries still holding part of it
 * @property {boolean} open still being relayed (not credited before closeBatch)
 */

/**
 * @param {object} options
 * @param {() => number} options.stallTimeoutMs read when used: the bus may be configured again
 * @param {(origin: *, bytes: number) => void} options.onCredit
 * @param {(record: *, heldBytes: number) => void} options.onStuck
 * @param {(record: *) => void} options.onRecovered
 */
function createFlow (options) {
  const { stallTimeoutMs, onCredit, onStuck, onRecovered } = options
  /** @type {Map<*, object>} per receiving record */
  const ledgers = new Map()
  let timer = null

  function ledgerOf (record) {
    let ledger = ledgers.get(record)
    if (ledger === undefined) {
      ledger = { record, entries: [], head: 0, ownBytes: 0, stuck: false, lastProgressAt: Date.now() }
      ledgers.set(record, ledger)
      record.channel.onWritten = function written (channel) { progress(ledger, channel.writtenTotal) }
    }
    return ledger
  }

  function release (ledger, entry) {
    ledger.ownBytes -= entry.own
    const batch = entry.batch
    if (batch === null) return
    batch.remaining--
    if (batch.remaining === 0 && !batch.open && batch.credit > 0) onCredit(batch.origin, batch.credit)
  }

  /** The receiver's channel handed bytes to the OS: release what is out. */
  function progress (ledger, writtenTotal) {
    ledger.lastProgressAt = Date.now()
    if (ledger.stuck) {
      ledger.stuck = false
      onRecovered(ledger.record)
    }
    const entries = ledger.entries
    while (ledger.head < entries.length && entries[ledger.head].end <= writtenTotal) {
      release(ledger, entries[ledger.head])
      entries[ledger.head] = undefined
      ledger.head++
    }
    compact(ledger)
  }

  function compact (ledger) {
    if (ledger.head === ledger.entries.length) {
      ledger.entries = []
      ledger.head = 0
    } else if (ledger.head > 1024 && ledger.head * 2 > ledger.entries.length) {
      ledger.entries = ledger.entries.slice(ledger.head)
      ledger.head = 0
    }
  }

  function releaseAll (ledger) {
    const entries = ledger.entries
    ledger.entries = []
    for (let i = ledger.head; i < entries.length; i++) release(ledger, entries[i])
    ledger.head = 0
    ledger.ownBytes = 0
  }

  function checkStalls () {
    const now = Date.now()
    let waiting = false
    for (const ledger of ledgers.values()) {
      if (ledger.stuck || ledger.head === ledger.entries.length) continue
      if (now - ledger.lastProgressAt < stallTimeoutMs()) {
        waiting = true
        continue
      }
      const held = ledger.record.channel.queuedBytes
      debug('worker %s took nothing for %d ms with %d bytes queued: stuck', ledger.record.id, now - ledger.lastProgressAt, held)
      ledger.stuck = true
      releaseAll(ledger)
      onStuck(ledger.record, held)
    }
    if (!waiting) stopTimer()
  }

  function startTimer () {
    if (timer !== null) return
    timer = setInterval(checkStalls, Math.max(10, Math.min(1000, Math.floor(stallTimeoutMs() / 4))))
    timer.unref()
  }

  function stopTimer () {
    if (timer === null) return
    clearInterval(timer)
    timer = null
  }

  return {
    /** @returns {Batch} */
    openBatch (origin, credit) {
      // The count comes from the worker: anything but a sane number credits nothing.
      const bytes = typeof credit === 'number' && credit > 0 && credit <= Number.MAX_SAFE_INTEGER ? credit : 0
      return { origin, credit: bytes, remaining: 0, open: true }
    },

    /** Every message of the batch is relayed (or dropped): credit it now if nothing holds it. */
    closeBatch (batch) {
      batch.open = false
      if (batch.remaining === 0 && batch.credit > 0) onCredit(batch.origin, batch.credit)
    },

    /** True while `record` is stuck: messages to it are dropped. */
    isStuck (record) {
      const ledger = ledgers.get(record)
      return ledger !== undefined && ledger.stuck
    },

    /** Bytes of messages without a sender to slow down (the primary's, the bridge's) queued for `record`. */
    ownBytes (record) {
      const ledger = ledgers.get(record)
      return ledger === undefined ? 0 : ledger.ownBytes
    },

    /**
     * `bytes` were just reserved on `record`'s channel for a message of
     * `batch` (null: the primary's or the bridge's own message).
     */
    charge (record, batch, bytes) {
      const ledger = ledgerOf(record)
      const end = record.channel.reservedTotal
      const entries = ledger.entries
      if (ledger.head === entries.length) ledger.lastProgressAt = Date.now()
      const last = ledger.head < entries.length ? entries[entries.length - 1] : undefined
      if (last !== undefined && last.batch === batch) {
        last.end = end
        last.own += batch === null ? bytes : 0
      } else {
        entries.push({ end, batch, own: batch === null ? bytes : 0 })
        if (batch !== null) batch.remaining++
      }
      if (batch === null) ledger.ownBytes += bytes
      startTimer()
    },

    /** `record` exited: nothing it held will be written; credit it all back. */
    forget (record) {
      const ledger = ledgers.get(record)
      if (ledger === undefined) return
      ledgers.delete(record)
      if (record.channel.onWritten !== null) record.channel.onWritten = null
      releaseAll(ledger)
    },

    /** @returns {number} receivers currently stuck */
    stuckCount () {
      let count = 0
      for (const ledger of ledgers.values()) if (ledger.stuck) count++
      return count
    },

    close () {
      stopTimer()
    }
  }
}

module.exports = { createFlow }
