'use strict'

// lib/worker/server-timeouts.js on a server that never listens, fed the way
// a worker is fed handed-off connections: Node's own checks, and our
// fallback for a Node whose internals moved.

const { test } = require('node:test')
const assert = require('node:assert')
const http = require('http')
const net = require('net')
const { enforceServerTimeouts } = require('../lib/worker/server-timeouts')
const { eventually } = require('./helpers/wait')

/** An http.Server that never listens, and a net.Server on loopback that emits its connections into it. */
async function handoffServer (native) {
  const server = http.createServer({ connectionsCheckingInterval: 200 }, (req, res) => {
    if (req.url === '/slow') return setTimeout(() => res.end('slow'), 2500)
    req.resume()
    req.on('end', () => res.end('ok'))
  })
  server.headersTimeout = 1000
  server.requestTimeout = 1500
  server.keepAliveTimeout = 60000
  const how = enforceServerTimeouts(server, { native })
  const acceptor = net.createServer({ pauseOnConnect: true }, (socket) => {
    server.emit('connection', socket)
    socket.resume()
  })
  await new Promise((resolve) => acceptor.listen(0, '127.0.0.1', resolve))
  return { how, port: acceptor.address().port, close: () => acceptor.close() }
}

function open (port, head) {
  const entry = { closed: false, data: '' }
  entry.socket = net.connect(port, '127.0.0.1', () => { if (head) entry.socket.write(head) })
  entry.socket.setEncoding('latin1')
  entry.socket.on('data', (chunk) => { entry.data += chunk })
  entry.socket.on('error', () => {})
  entry.socket.on('close', () => { entry.closed = true })
  return entry
}

for (const native of [true, false]) {
  test(`${native ? 'node\'s own checks' : 'the fallback'}: half-sent heads and bodies get 408, a kept-alive socket and a slow handler do not`, async () => {
    const target = await handoffServer(native)
    assert.strictEqual(target.how, native ? 'native' : 'fallback')
    const heads = Array.from({ length: 5 }, () => open(target.port, 'GET / HTTP/1.1\r\nHost: x\r\n'))
    const body = open(target.port, 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc')
    const kept = open(target.port, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
    const slow = open(target.port, 'GET /slow HTTP/1.1\r\nHost: x\r\n\r\n')
    const all = [...heads, body, kept, slow]
    try {
      await eventually(() => heads.every((e) => e.closed) && body.closed, { timeoutMs: 15000, what: 'half-sent requests closed' })
      for (const e of heads) assert.match(e.data, /^HTTP\/1\.1 408 /)
      assert.match(body.data, /^HTTP\/1\.1 408 /)
      // The slow handler had its whole request: it answers, past requestTimeout.
      await eventually(() => /slow$/.test(slow.data), { timeoutMs: 15000, what: 'the slow answer' })
      assert.match(slow.data, /^HTTP\/1\.1 200 /)
      assert.match(kept.data, /^HTTP\/1\.1 200 /)
      assert.strictEqual(kept.closed, false, 'an idle kept-alive socket is keepAliveTimeout\'s business')
    } finally {
      for (const e of all) e.socket.destroy()
      target.close()
    }
  })
}
