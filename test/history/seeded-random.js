'use strict'

/**
 * mulberry32: a small seeded generator, so a schedule's clients (and a
 * benchmark's round order) do the same things run after run.
 * @param {number} seed
 * @returns {() => number} a number in [0, 1) per call
 */
function seededRandom (seed) {
  let a = seed >>> 0
  return function random () {
    a = (a + 0x6D2B79F5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

module.exports = { seededRandom }
