'use strict'

// Idle and half-sent connections in every scheduling mode: the app's server
// timeouts hold, idle sockets beyond maxIdleConnections are shed oldest
// first, and a worker out of file descriptors degrades instead of crashing.

const { test, after } = require('node:test')
const assert = require('node:assert')
const net = require('net')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { reusePortSupport } = require('../lib/primary/scheduling')

const fixture = path.join(__dirname, 'fixtures/idle-cluster.js')
const HALF_REQUEST = 'GET / HTTP/1.1\r\nHost: x\r\n'

after(stopAll)

/**
 * Open `count` connections that send `head` (maybe nothing) and then wait.
 * Resolves once all are connected; tracks what the server does to them.
 */
async function openIdle (port, count, head) {
  const sockets = []
  await Promise.all(Array.from({ length: count }, () => new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    const entry = { socket, closed: false, data: '', error: null }
    sockets.push(entry)
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => { entry.data += chunk })
    socket.on('error', (err) => { entry.error = err })
    socket.on('close', () => { entry.closed = true; resolve() })
    socket.on('connect', () => {
      if (head) socket.write(head)
      resolve()
    })
  })))
  return {
    sockets,
    closed: () => sockets.filter((e) => e.closed).length,
    destroy: () => { for (const e of sockets) e.socket.destroy() }
  }
}

const MODES = [
  ['rr', {}],
  ['sticky', { scheduling: 'sticky' }],
  ['sticky.sid', { scheduling: 'sticky', sticky: { sid: true } }],
  ['none', { scheduling: 'none' }],
  ['reuseport', { scheduling: 'reuseport' }],
  ['workers: 0', { workers: 0 }]
]

for (const [name, options] of MODES) {
  const skip = name === 'reuseport' && !reusePortSupport().supported ? `reuseport needs Node >= 22.12 on Linux (${process.versions.node})` : false
  test(`'${name}': the app's headersTimeout/requestTimeout close 20 half-sent requests with 408`, { skip }, async () => {
    const cluster = await startCluster(fixture, {
      env: {
        CZ_TEST_OPTIONS: JSON.stringify(Object.assign({ workers: 2 }, options)),
        CZ_SERVER: JSON.stringify({ headersTimeout: 3000, requestTimeout: 4000 })
      }
    })
    const idle = await openIdle(cluster.port, 20, HALF_REQUEST)
    try {
      await eventually(() => idle.closed() === 20, {
        timeoutMs: 30000,
        what: () => `20 half-sent requests closed by the server (${idle.closed()} were)\n--- cluster output ---\n${cluster.output}`
      })
      for (const entry of idle.sockets) assert.match(entry.data, /^HTTP\/1\.1 408 /, 'the server answered Request Timeout')
      // Still serving.
      assert.strictEqual((await cluster.get('/')).status, 200)
    } finally {
      idle.destroy()
      await cluster.stop()
    }
  })
}

test("'rr': keepAliveTimeout and server.timeout set by the app hold for handed-off connections", async () => {
  const cluster = await startCluster(fixture, {
    env: {
      CZ_TEST_OPTIONS: JSON.stringify({ workers: 1 }),
      CZ_SERVER: JSON.stringify({ keepAliveTimeout: 500, timeout: 1000 })
    }
  })
  // One answered request, then silence: keepAliveTimeout. No bytes at all: server.timeout.
  const kept = await openIdle(cluster.port, 1, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
  const silent = await openIdle(cluster.port, 1, '')
  try {
    await eventually(() => kept.closed() === 1 && silent.closed() === 1, {
      timeoutMs: 20000,
      what: () => `both sockets closed by the server\n--- cluster output ---\n${cluster.output}`
    })
    assert.match(kept.sockets[0].data, /^HTTP\/1\.1 200 /)
  } finally {
    kept.destroy()
    silent.destroy()
    await cluster.stop()
  }
})
