'use strict'

/**
 * A per-peer budget of requests per minute (fixed one-minute windows), with
 * a bound on the peers remembered so that many addresses cannot grow it.
 */

const WINDOW_MS = 60000
/** Distinct peers remembered; beyond it new peers wait for the window to pass. */
const MAX_PEERS = 10000

/**
 * @param {number} perMinute requests each peer may make per window
 * @returns {{ take: (address: string, now: number) => number }} take() spends one and returns 0,
 *   or returns the seconds until this peer may try again (no budget left, or too many peers)
 */
function createPeerRate (perMinute) {
  const peers = new Map() // address -> { since, count }

  function sweep (now) {
    for (const [address, peer] of peers) {
      if (now - peer.since >= WINDOW_MS) peers.delete(address)
    }
  }

  function take (address, now) {
    let peer = peers.get(address)
    if (peer && now - peer.since >= WINDOW_MS) peer = null
    if (!peer) {
      if (peers.size >= MAX_PEERS) sweep(now)
      if (peers.size >= MAX_PEERS) return WINDOW_MS / 1000
      peer = { since: now, count: 0 }
      peers.set(address, peer)
    }
    if (peer.count >= perMinute) return Math.max(1, Math.ceil((peer.since + WINDOW_MS - now) / 1000))
    peer.count++
    return 0
  }

  return { take }
}

module.exports = { createPeerRate }
