'use strict'

/**
 * bench/socketio.js: socket.io broadcast fan-out across 2 workers, side by
 * side: clusterize's adapter (clusterize-express/socket.io, 'sticky' with
 * sticky.sid), the canonical @socket.io/cluster-adapter + @socket.io/sticky
 * setup on raw node:cluster, and one process with socket.io's default
 * adapter. N WebSocket clients (socket.io-client, in this process) are split
 * over the workers; one client asks its worker to io.emit() a burst of
 * small messages; every client counts what it receives and the
 * emit-to-receive latency (timestamps in the message, same machine).
 *
 *   node bench/socketio.js [--clients 200,1000] [--messages 200] [--rounds 3]
 *
 * Loopback only, ~2 min, stops every process it started by PID.
 */

const path = require('path')
const { performance } = require('perf_hooks')
const { startProcess, waitForLine, stopProcess, freePort, installCleanup, sleep } = require('./lib/proc')
const { median, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { percentile } = require('./lib/load')

const CLIENT_COUNTS = (process.argv.find((a) => a.startsWith('--clients=')) || '--clients=200,1000').split('=')[1].split(',').map(Number)
const MESSAGES = Number((process.argv.find((a) => a.startsWith('--messages=')) || '--messages=200').split('=')[1])
const ROUNDS = Number((process.argv.find((a) => a.startsWith('--rounds=')) || '--rounds=3').split('=')[1])
const SELF = __filename

// ---- the servers (this file, run as `node bench/socketio.js server <kind> <port>`)

function appServer () {
  const http = require('http')
  const { Server } = require('socket.io')
  const server = http.createServer((req, res) => res.end('ok'))
  return { server, Server }
}

function onConnection (io) {
  io.on('connection', (socket) => {
    socket.on('burst', (count, cb) => {
      for (let i = 0; i < count; i++) io.emit('m', performance.timeOrigin + performance.now())
      cb()
    })
  })
}

function runServer (kind, port) {
  const cluster = require('cluster')
  if (kind === 'single') {
    const { server, Server } = appServer()
    onConnection(new Server(server, { transports: ['websocket'] }))
    server.listen(port, '127.0.0.1', () => console.log('READY'))
  } else if (kind === 'clusterize') {
    const { clusterize } = require('..')
    const handle = clusterize(() => {
      const { server, Server } = appServer()
      const { createAdapter } = require('../socket.io')
      onConnection(new Server(server, { transports: ['websocket'], adapter: createAdapter() }))
      return server
    }, { port, host: '127.0.0.1', workers: 2, scheduling: 'sticky', sticky: { sid: true }, logger: false })
    if (cluster.isPrimary) handle.ready.then(() => console.log('READY'))
  } else if (kind === 'cluster-adapter') {
    const { setupPrimary, createAdapter } = require('@socket.io/cluster-adapter')
    const { setupMaster, setupWorker } = require('@socket.io/sticky')
    if (cluster.isPrimary) {
      const http = require('http')
      const httpServer = http.createServer()
      setupMaster(httpServer, { loadBalancingMethod: 'least-connection' })
      setupPrimary()
      cluster.setupPrimary({ serialization: 'advanced' })
      let ready = 0
      for (let i = 0; i < 2; i++) cluster.fork().on('online', () => { if (++ready === 2) httpServer.listen(port, '127.0.0.1', () => console.log('READY')) })
    } else {
      const { server, Server } = appServer()
      const io = new Server(server, { transports: ['websocket'], adapter: createAdapter() })
      setupWorker(io)
      onConnection(io)
    }
  }
}

// ---- the measurement

async function round (kind, clients) {
  const { io } = require('socket.io-client')
  const port = await freePort()
  const proc = startProcess({ args: [SELF, 'server', kind, String(port)], name: kind })
  const sockets = []
  try {
    await waitForLine(proc, /^READY/, 30000)
    await sleep(500)
    const latencies = []
    let received = 0
    for (let i = 0; i < clients; i++) {
      const socket = io(`http://127.0.0.1:${port}`, { transports: ['websocket'], reconnection: false, forceNew: true })
      socket.on('m', (sentAt) => {
        received++
        if (received % 7 === 0) latencies.push(performance.timeOrigin + performance.now() - sentAt)
      })
      sockets.push(socket)
    }
    await Promise.all(sockets.map((s) => new Promise((resolve, reject) => {
      if (s.connected) return resolve()
      s.once('connect', resolve)
      s.once('connect_error', reject)
    })))
    await sleep(300)
    const expected = clients * MESSAGES
    const started = performance.now()
    await new Promise((resolve) => sockets[0].emit('burst', MESSAGES, resolve))
    const deadline = Date.now() + 60000
    while (received < expected && Date.now() < deadline) await sleep(5)
    const seconds = (performance.now() - started) / 1000
    return { delivered: received / seconds, lost: expected - received, p50: percentile(latencies, 50), p99: percentile(latencies, 99) }
  } finally {
    for (const s of sockets) s.disconnect()
    await stopProcess(proc)
  }
}

async function main () {
  installCleanup()
  const kinds = [['single', 'one process (default adapter)'], ['cluster-adapter', '@socket.io/cluster-adapter + sticky (2 workers)'], ['clusterize', 'clusterize adapter (2 workers)']]
  console.log(`## socket.io broadcast fan-out: one io.emit() burst of ${MESSAGES} messages to every client (medians of ${ROUNDS} rounds)\n`)
  console.log(machineLine())
  console.log('\nWebSocket clients (socket.io-client) in the bench process, split over the workers; delivered = messages received by all clients per second from the first emit to the last receipt; latency = emit to receipt (every 7th message). The clients share the 2 cores with the servers.\n')
  const rows = []
  for (const clients of CLIENT_COUNTS) {
    const results = new Map(kinds.map(([kind]) => [kind, []]))
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 === 0 ? kinds : kinds.slice().reverse()
      for (const [kind] of order) results.get(kind).push(await round(kind, clients))
    }
    const anchor = median(results.get('cluster-adapter').map((x) => x.delivered))
    for (const [kind, label] of kinds) {
      const list = results.get(kind)
      const delivered = median(list.map((x) => x.delivered))
      rows.push([String(clients), label, fmt(delivered), ratio(delivered, anchor), fmt(median(list.map((x) => x.p50)), 1), fmt(median(list.map((x) => x.p99)), 1), list.reduce((a, x) => a + x.lost, 0)])
    }
  }
  console.log(markdownTable(['clients', 'setup', 'delivered msg/s', 'vs cluster-adapter', 'p50 ms', 'p99 ms', 'lost'], rows))
}

if (process.argv[2] === 'server') {
  runServer(process.argv[3], Number(process.argv[4]))
} else {
  main().catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
}
