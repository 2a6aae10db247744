'use strict'

/**
 * What the primary tells a sending worker about its relayed messages:
 * credits (bytes every receiver took, which leave its budget, see flow.js)
 * and drops (messages a stuck worker lost). Notices to one sender made while
 * the last one is still queued in its channel are added to that one: a burst
 * of relays costs one small envelope, not one per message.
 */

const { bus: busMessage } = require('../protocol')

/**
 * @param {{ records: Set<object>, post: (record: object, message: object) => void }} options
 *   records: the live senders (a notice to an exited one is dropped)
 */
function createNotices (options) {
  const { records, post } = options
  /** @type {Map<object, object>} per sender: the CREDIT envelope still queued in its channel */
  const openCredits = new Map()
  /** @type {Map<object, object>} per sender: the DROPPED envelope still queued in its channel */
  const openDrops = new Map()

  return {
    /** Give `origin` (a sender's record) `bytes` back: every receiver took its messages. */
    credit (origin, bytes) {
      if (!records.has(origin)) return
      const open = openCredits.get(origin)
      if (open !== undefined && origin.channel.lastQueued() === open) {
        open.n += bytes
        return
      }
      const message = busMessage.credit(bytes)
      openCredits.set(origin, message)
      post(origin, message)
    },

    /** Tell `origin` that one of its messages to `record` (on `topic`) was dropped. */
    dropped (origin, record, topic) {
      if (!records.has(origin)) return
      const open = openDrops.get(origin)
      if (open !== undefined && open.w === record.id && origin.channel.lastQueued() === open) {
        open.n++
        return
      }
      const message = busMessage.dropped(record.id, 1, topic)
      openDrops.set(origin, message)
      post(origin, message)
    },

    /** `record` exited. */
    forget (record) {
      openCredits.delete(record)
      openDrops.delete(record)
    }
  }
}

module.exports = { createNotices }
