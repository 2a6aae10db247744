'use strict'

/** The order of contenders in rounds: rotated, or drawn from a seed. */

const { seededRandom } = require('../../test/history/seeded-random')

/**
 * Round r runs the contenders starting at r (mod n): each one goes first once in n rounds.
 * @template T
 * @param {T[]} list
 * @param {number} round
 * @returns {T[]}
 */
function rotated (list, round) {
  const k = round % list.length
  return list.slice(k).concat(list.slice(0, k))
}

/**
 * Round r runs the contenders in an order drawn from r (the same for every
 * run): unlike a rotation, which keeps the cyclic order, no contender always
 * runs right after the same one, so what one leaves behind (a heap being
 * given back, a busy allocator) does not fall on the same neighbour each round.
 * @template T
 * @param {T[]} list
 * @param {number} round
 * @returns {T[]}
 */
function shuffled (list, round) {
  const out = list.slice()
  const random = seededRandom(0x9e3779b9 ^ (round + 1))
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    const swap = out[i]
    out[i] = out[j]
    out[j] = swap
  }
  return out
}

module.exports = { rotated, shuffled }
