'use strict'

/**
 * Admission and back-pressure for the dashboard's event streams. Each open
 * stream costs the primary (the process that supervises everything) memory
 * and a write per snapshot, so: at most `maxStreamsPerPeer` open from one
 * peer address and `streamsPerMinute` new ones per peer, at most `maxStreams`
 * at once, and a stream whose unsent bytes pass `streamBufferBytes` (a client
 * that stopped reading) is closed. The per-peer limits are checked before
 * the global cap, so one peer cannot take every slot and lock the others out.
 */

const debug = require('debug')('clusterize:dashboard')
const { createPeerRate } = require('./peer-rate')

/**
 * @param {{ maxStreams: number, maxStreamsPerPeer?: number, streamBufferBytes: number, streamsPerMinute: number }} limits
 */
function createStreams (limits) {
  const open = new Set()
  /** peer address -> its open streams */
  const byPeer = new Map()
  const kPeer = Symbol('clusterize.streamPeer')
  // At or above the cap, the cap alone is the limit (and says so).
  const perPeer = limits.maxStreamsPerPeer && limits.maxStreamsPerPeer < limits.maxStreams ? limits.maxStreamsPerPeer : Infinity
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
    const address = peerOf(req)
    // One peer's limits first: a peer at its own limit is told so, and never reaches the shared cap.
    if ((byPeer.get(address) || 0) >= perPeer) {
      refused++
      return { status: 429, retryAfter: 10, message: `too many open dashboards from ${address} (probes.maxStreamsPerPeer is ${perPeer}); close one first\n` }
    }
    const retryAfter = rate.take(address, now)
    if (retryAfter > 0) {
      refused++
      return { status: 429, retryAfter, message: `too many new dashboard streams from ${address} (probes.streamsPerMinute is ${limits.streamsPerMinute})\n` }
    }
    if (open.size >= limits.maxStreams) {
      refused++
      return { status: 503, retryAfter: 10, message: `too many open dashboards (probes.maxStreams is ${limits.maxStreams}); close one or try again shortly\n` }
    }
    return null
  }

  function peerOf (req) {
    return req.socket.remoteAddress || 'unknown'
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

  /** @param {import('http').ServerResponse} res @param {import('http').IncomingMessage} req */
  function add (res, req) {
    if (open.has(res)) return
    const address = peerOf(req)
    res[kPeer] = address
    byPeer.set(address, (byPeer.get(address) || 0) + 1)
    open.add(res)
  }

  function remove (res) {
    if (!open.delete(res)) return false
    const address = res[kPeer]
    const left = (byPeer.get(address) || 1) - 1
    if (left === 0) byPeer.delete(address)
    else byPeer.set(address, left)
    return true
  }

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
      byPeer.clear()
    },
    get size () { return open.size },
    get evicted () { return evicted },
    get refused () { return refused }
  }
}

module.exports = { createStreams }
