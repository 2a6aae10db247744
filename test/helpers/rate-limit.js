'use strict'

/**
 * express-rate-limit limiters behind real servers on loopback, hit over
 * fresh connections (each request a new client, as the limit counts them).
 */

const http = require('http')
const express = require('express')

/**
 * An express app behind `limiter`; a store's error answers 500 with its code.
 * @returns {Promise<{ port: number, close: () => Promise<void> }>}
 */
async function serveLimited (limiter) {
  const app = express()
  app.use(limiter)
  app.get('/', (req, res) => res.send('ok'))
  app.use((err, req, res, next) => res.status(500).send('store error: ' + err.code))
  const server = http.createServer(app)
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { port: server.address().port, close: () => new Promise((resolve) => server.close(resolve)) }
}

/** `n` GETs over fresh connections; their status codes. */
async function statuses (port, n) {
  const out = []
  for (let i = 0; i < n; i++) {
    const res = await fetch(`http://127.0.0.1:${port}/`, { headers: { connection: 'close' } })
    await res.text()
    out.push(res.status)
  }
  return out
}

/** How many of `codes` are `code`. */
function count (codes, code) {
  return codes.filter((c) => c === code).length
}

module.exports = { serveLimited, statuses, count }
