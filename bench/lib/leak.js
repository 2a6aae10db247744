'use strict'

/**
 * A fast memory leak on the V8 heap, for the benches of the memory guard
 * and of reloads into leaking code.
 */

const MB = 1024 * 1024

/**
 * Leak `mbPerSecond` of small objects, in 10 steps a second, kept reachable forever.
 * @param {number} mbPerSecond
 */
function startLeak (mbPerSecond) {
  const leaked = []
  setInterval(function leak () {
    const chunk = []
    // About 41 bytes a { a, b } object with its array slot (measured: 48 gave 53-61 MB/s for 70).
    for (let i = 0; i < mbPerSecond * MB / 10 / 41; i++) chunk.push({ a: i, b: i * 2 })
    leaked.push(chunk)
  }, 100)
}

module.exports = { startLeak }
