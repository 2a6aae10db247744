'use strict'

/**
 * Rendezvous (highest random weight) hashing: each key goes to the slot with
 * the highest hash(key, slot). Removing a slot moves only the keys that
 * were on it; every other key keeps its slot.
 */

function fnv1a (text) {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  // Final avalanche so nearby keys (127.0.0.2, 127.0.0.3) spread well.
  hash ^= hash >>> 16
  hash = Math.imul(hash, 0x85ebca6b)
  hash ^= hash >>> 13
  hash = Math.imul(hash, 0xc2b2ae35)
  hash ^= hash >>> 16
  return hash >>> 0
}

/**
 * @template T
 * @param {string} key
 * @param {T[]} candidates
 * @param {(candidate: T) => number} slotOf
 * @returns {T|undefined}
 */
function pickRendezvous (key, candidates, slotOf) {
  let best
  let bestScore = -1
  for (const candidate of candidates) {
    const score = fnv1a(key + '#' + slotOf(candidate))
    if (score > bestScore) {
      bestScore = score
      best = candidate
    }
  }
  return best
}

module.exports = { pickRendezvous, fnv1a }
