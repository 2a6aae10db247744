'use strict'

/**
 * bench/socketio.js: socket.io broadcast fan-out across 2 workers, side by
 * side: clusterize's adapter (clusterize-express/socket.io, 'sticky' with
 * sticky.sid; also with `coalesceWrites: false`, to show what coalescing
 * gives), the canonical @socket.io/cluster-adapter + @socket.io/sticky setup
 * on raw node:cluster, and one process with socket.io's default adapter. N
 * WebSocket clients in this process are split over the workers; one client
 * asks its worker to io.emit() a burst of small messages; every client counts
 * what it receives and the emit-to-receive latency (timestamps in the
 * message, same machine). Two kinds of client: socket.io-client, and a bare
 * client (test/helpers/bare-socketio-client.js) that costs far less per
 * message, so that the servers rather than the clients set the pace.
 *
 *   node bench/socketio.js [--clients=200,1000] [--messages=200] [--rounds=3]
 *                          [--client=socket.io,bare] [--busy=0,2] [--kinds=single,cluster-adapter,...]
 *
 * --kinds picks the setups (default: the first four below); 'clusterize-recovery' is the
 * clusterize adapter with socket.io's connectionStateRecovery on (every broadcast is numbered
 * by the primary). "primary CPU" is the CPU time (user + system, from /proc) of the process
 * the bench started (the primary; for 'single', the one server) from the burst to the last receipt.
 *
 * --busy=2 repeats the run with 2 CPU-spinning processes beside it (the
 * machine busy). Loopback only, a few minutes, stops every process it
 * started by PID.
 */

const path = require('path')
const { performance } = require('perf_hooks')
const { startProcess, waitForLine, stopProcess, freePort, installCleanup, sleep, threadsCpuMs } = require('./lib/proc')
const { median, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { percentile } = require('./lib/load')
const { connectBareClient } = require('../test/helpers/bare-socketio-client')
const { startCpuBurners } = require('./lib/busy')

const QUICK = process.argv.includes('--quick')
const CLIENT_COUNTS = (process.argv.find((a) => a.startsWith('--clients=')) || (QUICK ? '--clients=200' : '--clients=200,1000')).split('=')[1].split(',').map(Number)
const MESSAGES = Number((process.argv.find((a) => a.startsWith('--messages=')) || '--messages=200').split('=')[1])
const ROUNDS = Number((process.argv.find((a) => a.startsWith('--rounds=')) || (QUICK ? '--rounds=1' : '--rounds=3')).split('=')[1])
const CLIENT_KINDS = (process.argv.find((a) => a.startsWith('--client=')) || '--client=socket.io,bare').split('=')[1].split(',')
const BUSY = (process.argv.find((a) => a.startsWith('--busy=')) || '--busy=0').split('=')[1].split(',').map(Number)
const KINDS = (process.argv.find((a) => a.startsWith('--kinds=')) || '--kinds=single,cluster-adapter,clusterize,clusterize-uncoalesced').split('=')[1].split(',')
for (const kind of CLIENT_KINDS) if (!['socket.io', 'bare'].includes(kind)) throw new Error(`--client takes socket.io and/or bare, got ${kind}`)
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
    // One emit every `everyMs` ms: each message's fan-out latency without a burst queued in front of it.
    socket.on('paced', (count, everyMs, cb) => {
      let sent = 0
      const timer = setInterval(() => {
        io.emit('m', performance.timeOrigin + performance.now())
        if (++sent === count) clearInterval(timer)
      }, everyMs)
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
  } else if (kind === 'clusterize' || kind === 'clusterize-uncoalesced' || kind === 'clusterize-recovery') {
    // BENCH_CLUSTERIZE_MODULE: another checkout's clusterize (bench/regression.js).
    const pkg = process.env.BENCH_CLUSTERIZE_MODULE || path.join(__dirname, '..')
    const { clusterize } = require(pkg)
    const handle = clusterize(() => {
      const { server, Server } = appServer()
      const { createAdapter } = require(path.join(pkg, 'socket.io'))
      const recovery = kind === 'clusterize-recovery' ? { connectionStateRecovery: {} } : {}
      onConnection(new Server(server, { transports: ['websocket'], adapter: createAdapter({ coalesceWrites: kind !== 'clusterize-uncoalesced' }), ...recovery }))
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

/**
 * One burst to `clients` clients of a fresh server of `kind`.
 * @param {object} [env] for the server (BENCH_CLUSTERIZE_MODULE)
 * @param {{ pacedEveryMs?: number }} [options] pacedEveryMs: the same number of messages, one
 *   io.emit() every that many ms instead of a burst (delivered msg/s then only says the rate)
 * @returns {Promise<{ delivered: number, lost: number, p50: number, p99: number, primaryCpu: number }>} primaryCpu in ms over the burst
 */
async function round (kind, clients, client, env, options) {
  const everyMs = options && options.pacedEveryMs
  const { io } = require('socket.io-client')
  const port = await freePort()
  const proc = startProcess({ args: [SELF, 'server', kind, String(port)], name: kind, env })
  const sockets = []
  try {
    await waitForLine(proc, /^READY/, 30000)
    await sleep(500)
    const latencies = []
    let received = 0
    for (let i = 0; i < clients && client === 'bare'; i++) {
      const socket = connectBareClient(port, {
        onEvent (frame) {
          // 42["m",<sent at>] (with connectionStateRecovery: 42["m",<sent at>,"<offset>"])
          if (++received % 7 === 0) latencies.push(performance.timeOrigin + performance.now() - parseFloat(frame.slice(frame.indexOf(',') + 1)))
        }
      })
      socket.disconnect = socket.close
      sockets.push(socket)
    }
    for (let i = 0; i < clients && client !== 'bare'; i++) {
      const socket = io(`http://127.0.0.1:${port}`, { transports: ['websocket'], reconnection: false, forceNew: true })
      socket.on('m', (sentAt) => {
        received++
        if (received % 7 === 0) latencies.push(performance.timeOrigin + performance.now() - sentAt)
      })
      sockets.push(socket)
    }
    await Promise.all(sockets.map((s) => s.ready || new Promise((resolve, reject) => {
      if (s.connected) return resolve()
      s.once('connect', resolve)
      s.once('connect_error', reject)
    })))
    await sleep(300)
    const expected = clients * MESSAGES
    // Every thread's schedstat: /proc's 10 ms ticks round a burst's relay work to 0 or 10 ms.
    const cpuBefore = threadsCpuMs(proc.pid)
    const started = performance.now()
    const ask = everyMs ? ['paced', MESSAGES, everyMs] : ['burst', MESSAGES]
    await (client === 'bare' ? sockets[0].request(...ask) : new Promise((resolve) => sockets[0].emit(...ask, resolve)))
    const deadline = Date.now() + 60000
    while (received < expected && Date.now() < deadline) await sleep(5)
    const seconds = (performance.now() - started) / 1000
    const primaryCpu = threadsCpuMs(proc.pid) - cpuBefore
    return { delivered: received / seconds, lost: expected - received, p50: percentile(latencies, 50), p99: percentile(latencies, 99), primaryCpu }
  } finally {
    for (const s of sockets) s.disconnect()
    await stopProcess(proc)
  }
}

async function main () {
  installCleanup()
  const kinds = [
    ['single', 'one process (default adapter)'],
    ['cluster-adapter', '@socket.io/cluster-adapter + sticky (2 workers)'],
    ['clusterize', 'clusterize adapter (2 workers)'],
    ['clusterize-uncoalesced', 'clusterize adapter, coalesceWrites: false (2 workers)'],
    ['clusterize-recovery', 'clusterize adapter, connectionStateRecovery (2 workers)']
  ].filter(([kind]) => KINDS.includes(kind))
  const started = Date.now()
  console.log(`## socket.io broadcast fan-out: one io.emit() burst of ${MESSAGES} messages to every client (medians of ${ROUNDS} rounds)\n`)
  console.log(machineLine())
  console.log('\nClients in the bench process, split over the workers; delivered = messages received by all clients per second from the first emit to the last receipt; latency = emit to receipt (every 7th message). The clients share the 2 cores with the servers. "busy": that many extra processes spin a CPU each during the rounds.\n')
  const rows = []
  for (const busy of BUSY) {
    const burners = startCpuBurners(busy)
    try {
      for (const client of CLIENT_KINDS) {
        for (const clients of CLIENT_COUNTS) {
          const results = new Map(kinds.map(([kind]) => [kind, []]))
          for (let r = 0; r < ROUNDS; r++) {
            const order = r % 2 === 0 ? kinds : kinds.slice().reverse()
            for (const [kind] of order) results.get(kind).push(await round(kind, clients, client))
          }
          const anchor = results.get('cluster-adapter') || results.get(kinds[0][0])
          for (const [kind, label] of kinds) {
            const list = results.get(kind)
            const delivered = median(list.map((x) => x.delivered))
            const p99 = median(list.map((x) => x.p99))
            rows.push([client, String(busy), String(clients), label, fmt(delivered), ratio(delivered, median(anchor.map((x) => x.delivered))),
              fmt(median(list.map((x) => x.p50)), 1), fmt(p99, 1), ratio(p99, median(anchor.map((x) => x.p99))), fmt(median(list.map((x) => x.primaryCpu))), list.reduce((a, x) => a + x.lost, 0)])
          }
        }
      }
    } finally {
      await burners.stop()
    }
  }
  console.log(markdownTable(['client', 'busy', 'clients', 'setup', 'delivered msg/s', 'vs cluster-adapter', 'p50 ms', 'p99 ms', 'p99 vs cluster-adapter', 'primary CPU ms', 'lost'], rows))
  console.log(`\nTotal run time ${((Date.now() - started) / 1000).toFixed(0)} s.`)
}

if (process.argv[2] === 'server') {
  runServer(process.argv[3], Number(process.argv[4]))
} else if (require.main === module) {
  main().catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
}

// bench/regression.js runs rounds against another tree with these.
module.exports = { round, MESSAGES }
