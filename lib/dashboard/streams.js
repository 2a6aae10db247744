'use strict'

/**
 * Admission and back-pressure for the dashboard's event streams. Each open
 * stream costs the primary (the process that supervises everything) memory
 * and a write per snapshot, so: at most `maxStreams` at once, at most
 * `streamsPerMinute` new ones per peer address, and a stream whose unsent
 * bytes pass `streamBufferBytes` (a client that stopped reading) is closed.
 */

const debug = require('debug')('clusterize:dashboard')
const { createPeerRate } = require('./peer-rate')

/**
 * @param {{ maxStreams: number, streamBufferBytes: number, streamsPerMinute: number }} limits
 */
function createStreams (limits) {
  const open = new Set()
  const rate = createPeerRate(limits.streamsPerMinute)
  let evicted = 0
  let refused = 0

  /**
   * May a new stream from this request open now?
   * @param {import('http').IncomingMessage} req
   * @returns {{ status: number, retryAfter: number, message: string }|null} null when it may
   */
  function admit (req) {
    const now = Date.now()
    if (open.size >= limits.maxStreams) {
      refused++
      return { status: 503, retryAfter: 10, message: `too many open dashboards (probes.maxStreams is ${limits.maxStreams}); close one or try again shortly\n` }
    }
    const address = req.socket.remoteAddress || 'unknown'
    const retryAfter = rate.take(address, now)
    if (retryAfter > 0) {
      refused++
      return { status: 429, retryAfter, message: `too many new dashboard streams from ${address} (probes.streamsPerMinute is ${limits.streamsPerMinute})\n` }
    }
    return null
  }

  /**
   * Write a frame; close the stream instead when the client has stopped
   * reading and the bytes it has not taken pass the bound.
   * @param {import('http').ServerResponse} res
   * @param {string} frame
   * @returns {boolean} whether the stream is still open
   */
  function write (res, frame) {
    if (!open.has(res)) return false
    if (res.writableLength + Buffer.byteLength(frame) > limits.streamBufferBytes) {
      evicted++
      debug('closing a dashboard stream that does not read (%d bytes waiting)', res.writableLength)
      remove(res)
      res.destroy()
      return false
    }
    res.write(frame)
    return true
  }

  function add (res) { open.add(res) }
  function remove (res) { return open.delete(res) }

  return {
    admit,
    add,
    remove,
    write,
    /** Write to every open stream. */
    broadcast (frame) {
      for (const res of open) write(res, frame)
    },
    /** End every stream (shutdown). */
    endAll () {
      for (const res of open) res.end()
      open.clear()
    },
    get size () { return open.size },
    get evicted () { return evicted },
    get refused () { return refused }
  }
}

module.exports = { createStreams }
