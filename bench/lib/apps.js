'use strict'

/**
 * The apps the benches serve: the hello example as is, the hello example
 * plus a CPU-heavy route (GET /cpu blocks the event loop for ~BLOCK_MS), and
 * the hello example plus a query of death (GET /boom throws outside Express's
 * reach, so the worker process dies: bench/query-of-death.js).
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

function createQueryOfDeathApp () {
  const app = createHello()
  app.get('/boom', function queryOfDeath () {
    // Thrown from a callback, not the handler: Express cannot catch it, and the process dies.
    setImmediate(() => { throw new Error('query of death') })
  })
  return app
}

/** @param {'hello'|'mixed'|'qod'} name */
function createApp (name) {
  if (name === 'mixed') return createMixedApp()
  if (name === 'qod') return createQueryOfDeathApp()
  return createHello()
}

module.exports = { createApp, BLOCK_MS }
