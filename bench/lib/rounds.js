'use strict'

/** The order of contenders in rotated rounds. */

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

module.exports = { rotated }
