'use strict'

/**
 * The apps the benches serve: the hello example as is, and the hello example
 * plus a CPU-heavy route (GET /cpu blocks the event loop for ~BLOCK_MS).
 */

const createHello = require('../../examples/hello/app')

const BLOCK_MS = Number(process.env.BENCH_BLOCK_MS) || 50

function createMixedApp () {
  const app = createHello()
  app.get('/cpu', function cpuRoute (req, res) {
    const until = performance.now() + BLOCK_MS
    let spins = 0
    while (performance.now() < until) spins++
    res.json({ spins })
  })
  return app
}

/** @param {'hello'|'mixed'} name */
function createApp (name) {
  return name === 'mixed' ? createMixedApp() : createHello()
}

module.exports = { createApp, BLOCK_MS }
