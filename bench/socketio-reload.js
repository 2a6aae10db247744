'use strict'

/**
 * bench/socketio-reload.js: socket.io clients and messages lost across
 * reloads (#12). 2 workers, N WebSocket clients (socket.io-client, in this
 * process, reconnection on with its default delays) joined to one room; one
 * sender emits numbered messages to the room at a fixed rate for the whole
 * run; 3 reloads during the run. Setups, interleaved round by round:
 *
 * - clusterize + its adapter with socket.io's connectionStateRecovery on
 *   (reload = SIGUSR2 to the primary);
 * - the same without recovery;
 * - the anchor: @socket.io/sticky + @socket.io/cluster-adapter with a
 *   hand-written primary whose SIGUSR2 is the textbook rolling restart (for
 *   each worker: fork a new one, wait until it is set up, kill the old one),
 *   connectionStateRecovery on too (the state is in each worker's memory).
 *
 *   node bench/socketio-reload.js [--clients 100] [--rate 200] [--rounds 3] [--reloads 3] [--gap 2500]
 *
 * Loopback only, ~2.5 min, stops every process it started by PID.
 */

const debug = require('debug')('clusterize:bench')
const { startProcess, waitForLine, stopProcess, freePort, installCleanup, sleep } = require('./lib/proc')
const { median, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { numberArg } = require('./lib/args')

const CLIENTS = numberArg('--clients', 100, 50)
const RATE = numberArg('--rate', 200)
const ROUNDS = numberArg('--rounds', 3, 1)
const RELOADS = numberArg('--reloads', 3, 1)
const GAP_MS = numberArg('--gap', 2500, 1500)
/** After measuring, wait up to this long for clients still disconnected and say when they came back (diagnostics). */
const LINGER_MS = numberArg('--linger', 0)
const ROOM = 'r'
const ACK_TIMEOUT_MS = 5000
const SELF = __filename

const ALL_SETUPS = [
  ['clusterize-recovery', 'clusterize adapter, connectionStateRecovery on (SIGUSR2 reload)'],
  ['clusterize', 'clusterize adapter, no recovery (SIGUSR2 reload)'],
  ['cluster-adapter', '@socket.io/cluster-adapter + sticky, connectionStateRecovery on (fork new, kill old)']
]
/** `--only clusterize-recovery,cluster-adapter` runs some setups only. */
const ONLY = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1].split(',') : null
const SETUPS = ONLY ? ALL_SETUPS.filter(([kind]) => ONLY.includes(kind)) : ALL_SETUPS

// ---- the servers (this file, run as `node bench/socketio-reload.js server <kind> <port>`)

/** The app: a client joins the room of its query; 'send' emits a numbered message to a room, then acks. */
function createIo (server, adapter, recovery) {
  const { Server } = require('socket.io')
  const io = new Server(server, {
    transports: ['websocket'],
    adapter,
    connectionStateRecovery: recovery ? { maxDisconnectionDuration: 60000 } : undefined
  })
  io.on('connection', function onConnection (socket) {
    if (!socket.recovered && socket.handshake.query.room) socket.join(String(socket.handshake.query.room))
    socket.on('send', function onSend (room, n, cb) {
      io.to(room).emit('msg', n)
      if (typeof cb === 'function') cb()
    })
  })
  return io
}

function runServer (kind, port) {
  const http = require('http')
  const cluster = require('cluster')
  if (kind === 'clusterize' || kind === 'clusterize-recovery') {
    const { clusterize } = require('..')
    const handle = clusterize(function createApp () {
      const server = http.createServer((req, res) => res.end('ok'))
      const { createAdapter } = require('../socket.io')
      createIo(server, createAdapter(), kind === 'clusterize-recovery')
      return server
    }, { port, host: '127.0.0.1', workers: 2, scheduling: 'sticky', sticky: { sid: true }, reload: { bakeMs: 0 }, logger: false })
    if (cluster.isPrimary) {
      handle.ready.then(() => console.log('READY'))
      handle.on('reload:done', (result) => console.log('RELOADED ' + JSON.stringify({ ok: result.ok, durationMs: result.durationMs })))
    }
    return
  }
  // The anchor: @socket.io/sticky in a hand-written primary, @socket.io/cluster-adapter.
  const { setupPrimary, createAdapter } = require('@socket.io/cluster-adapter')
  const { setupMaster, setupWorker } = require('@socket.io/sticky')
  if (cluster.isPrimary) {
    const httpServer = http.createServer()
    setupMaster(httpServer, { loadBalancingMethod: 'least-connection' })
    setupPrimary()
    cluster.setupPrimary({ serialization: 'advanced' })
    Promise.all([forkReady(cluster), forkReady(cluster)]).then(() => {
      httpServer.listen(port, '127.0.0.1', () => console.log('READY'))
    })
    let reloading = false
    process.on('SIGUSR2', async function rollingRestart () {
      if (reloading) return
      reloading = true
      const started = Date.now()
      // The textbook rolling restart, one worker at a time: a new one up, then the old one killed.
      for (const old of Object.values(cluster.workers)) {
        await forkReady(cluster)
        await new Promise((resolve) => {
          old.once('exit', resolve)
          old.kill()
        })
      }
      reloading = false
      console.log('RELOADED ' + JSON.stringify({ ok: true, durationMs: Date.now() - started }))
    })
  } else {
    const server = http.createServer((req, res) => res.end('ok'))
    const io = createIo(server, createAdapter(), true)
    setupWorker(io)
    process.send({ type: 'bench:ready' })
  }
}

/** Fork a worker and resolve once it has set up socket.io (its 'bench:ready' message). */
function forkReady (cluster) {
  return new Promise((resolve) => {
    const worker = cluster.fork()
    worker.on('message', function onMessage (message) {
      if (message && message.type === 'bench:ready') {
        worker.off('message', onMessage)
        resolve(worker)
      }
    })
  })
}

// ---- the clients

/** A client in the room that records every message and every (re)connection. */
function receiver (port) {
  const { io } = require('socket.io-client')
  const socket = io(`http://127.0.0.1:${port}`, { transports: ['websocket'], forceNew: true, query: { room: ROOM } })
  const client = { socket, got: [], connects: 0, recovered: 0, downSince: 0, longestDownMs: 0 }
  socket.on('msg', (n) => client.got.push(n))
  socket.on('connect', () => {
    client.connects++
    if (socket.recovered) client.recovered++
    if (client.downSince) client.longestDownMs = Math.max(client.longestDownMs, Date.now() - client.downSince)
    client.downSince = 0
  })
  socket.on('disconnect', () => { client.downSince = Date.now() })
  return client
}

/**
 * Emit numbered messages to the room at RATE per second while connected
 * (ticks missed while disconnected are skipped, never sent late). A message
 * counts as sent once its ack is back: the server has run
 * io.to(room).emit() for it. One whose ack does not come back (the sender
 * was cut, or 5 s passed) is "unsure": it may or may not have been emitted.
 */
function startSender (port) {
  const { io } = require('socket.io-client')
  // It reconnects fast, so that the stream of messages has no long holes.
  const socket = io(`http://127.0.0.1:${port}`, { transports: ['websocket'], forceNew: true, reconnectionDelay: 50, reconnectionDelayMax: 200 })
  const sender = { socket, acked: new Set(), unsure: new Set(), next: 1, pending: 0, skipped: 0 }
  const started = Date.now()
  let due = 0
  const timer = setInterval(function tick () {
    const target = Math.floor((Date.now() - started) * RATE / 1000)
    let count = Math.min(target - due, Math.max(1, RATE / 10)) // a stalled timer does not burst
    due = target
    if (!socket.connected) {
      sender.skipped += count
      return
    }
    while (count-- > 0) {
      const n = sender.next++
      sender.pending++
      socket.timeout(ACK_TIMEOUT_MS).emit('send', ROOM, n, (err) => {
        sender.pending--
        if (err) sender.unsure.add(n)
        else sender.acked.add(n)
      })
    }
  }, 5)
  sender.stop = async function stop () {
    clearInterval(timer)
    const deadline = Date.now() + ACK_TIMEOUT_MS + 1000
    while (sender.pending > 0 && Date.now() < deadline) await sleep(20)
  }
  return sender
}

/** Resolve when `check()` is true or `ms` have passed. */
async function waitUntil (check, ms) {
  const deadline = Date.now() + ms
  while (!check() && Date.now() < deadline) await sleep(50)
  return check()
}

// ---- one run of one setup

async function runOnce (kind) {
  const port = await freePort()
  const proc = startProcess({ args: [SELF, 'server', kind, String(port)], name: kind, env: { DEBUG: process.env.BENCH_SERVER_DEBUG || '' } })
  // BENCH_SERVER_DEBUG=clusterize:* writes the server's debug lines to a file in the temp dir.
  if (process.env.BENCH_SERVER_DEBUG) proc.child.stderr.pipe(require('fs').createWriteStream(require('path').join(require('os').tmpdir(), `socketio-reload-${kind}-${proc.pid}.log`)))
  const clients = []
  let sender = null
  try {
    await waitForLine(proc, /^READY/, 30000)
    for (let i = 0; i < CLIENTS; i++) clients.push(receiver(port))
    if (!await waitUntil(() => clients.every((c) => c.socket.connected), 20000)) throw new Error(`${kind}: not every client connected`)
    sender = startSender(port)
    await sleep(1000)
    const reloads = []
    for (let r = 1; r <= RELOADS; r++) {
      const started = Date.now()
      process.kill(proc.pid, 'SIGUSR2')
      await waitUntil(() => proc.lines.filter((l) => l.startsWith('RELOADED')).length >= r, 60000)
      const line = proc.lines.filter((l) => l.startsWith('RELOADED'))[r - 1]
      reloads.push(line ? JSON.parse(line.slice('RELOADED '.length)) : { ok: false, durationMs: Date.now() - started })
      debug('%s reload %d: %o', kind, r, reloads[r - 1])
      await sleep(GAP_MS)
    }
    await sender.stop()
    // Settle: clients reconnect (default backoff up to 5 s), messages in flight arrive.
    const last = Math.max(0, ...sender.acked)
    await waitUntil(() => clients.every((c) => c.socket.connected && (last === 0 || c.got.includes(last))), 10000)
    await sleep(300)
    const result = measure(kind, clients, sender, reloads)
    if (LINGER_MS > 0 && result.lost > 0) {
      const from = Date.now()
      const back = await waitUntil(() => clients.every((c) => c.socket.connected), LINGER_MS)
      process.stderr.write(`${kind}: ${result.lost} clients still disconnected at the end; ${back ? 'all connected ' + (Date.now() - from) + ' ms later' : 'still not after ' + LINGER_MS + ' ms'}\n`)
    }
    return result
  } finally {
    for (const c of clients) c.socket.disconnect()
    if (sender) sender.socket.disconnect()
    await stopProcess(proc)
  }
}

/** The figures of one run (see the definitions printed under the table). */
function measure (kind, clients, sender, reloads) {
  const result = { kind, sent: sender.acked.size, unsure: sender.unsure.size, skipped: sender.skipped, lost: 0, missing: 0, maxMissing: 0, duplicates: 0, outOfOrder: 0, longestDownMs: 0, reconnects: 0, recovered: 0, reloadMs: reloads.map((r) => r.durationMs), reloadsOk: reloads.every((r) => r.ok) }
  for (const c of clients) {
    if (!c.socket.connected) result.lost++
    const down = c.downSince ? Date.now() - c.downSince : 0
    result.longestDownMs = Math.max(result.longestDownMs, c.longestDownMs, down)
    result.reconnects += c.connects - 1
    result.recovered += c.recovered
    const seen = new Set()
    let highest = 0
    for (const n of c.got) {
      if (seen.has(n)) {
        result.duplicates++
        continue
      }
      seen.add(n)
      if (n < highest) result.outOfOrder++
      else highest = n
    }
    let missing = 0
    for (const n of sender.acked) if (!seen.has(n)) missing++
    result.missing += missing
    result.maxMissing = Math.max(result.maxMissing, missing)
  }
  return result
}

async function main () {
  installCleanup()
  console.log(`## socket.io across ${RELOADS === 1 ? 'a reload' : RELOADS + ' reloads'}: clients and messages lost (2 workers, ${CLIENTS} clients, ${RATE} msg/s to their room; medians of ${ROUNDS} rounds)\n`)
  console.log(machineLine())
  console.log(`\n${CLIENTS} WebSocket clients (socket.io-client in the bench process, reconnection on with its default delays: 1 s, up to 5 s, randomized) in one room; one sender client (reconnecting after 50-200 ms) emits numbered messages to the room through its worker at ${RATE}/s for the whole run; ${RELOADS === 1 ? 'one reload' : `${RELOADS} reloads ${GAP_MS / 1000} s apart`}. clusterize: SIGUSR2, rolling (\`reload.bakeMs: 0\`), old workers close WebSockets with 1012 after their successor is ready. Anchor: SIGUSR2 to a hand-written primary that, one worker at a time, forks a new worker, waits until it has set up socket.io, then \`worker.kill()\`s the old one.\n`)
  const results = new Map(SETUPS.map(([kind]) => [kind, []]))
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? SETUPS : SETUPS.slice().reverse()
    for (const [kind] of order) {
      const result = await runOnce(kind)
      process.stderr.write(`round ${r + 1} ${kind}: ${JSON.stringify(result)}\n`)
      results.get(kind).push(result)
    }
  }
  const rows = SETUPS.map(([kind, label]) => {
    const list = results.get(kind)
    const m = (key, digits) => fmt(median(list.map((x) => x[key])), digits)
    return [label, m('lost'), m('sent'), m('missing'), list.map((x) => fmt(x.missing)).join(' / '), fmt(median(list.map((x) => x.missing / CLIENTS)), 1), m('maxMissing'), m('duplicates'), m('outOfOrder'), fmt(median(list.map((x) => x.longestDownMs / 1000)), 1), m('reconnects'), m('recovered'), fmt(median(list.map((x) => median(x.reloadMs))))]
  })
  console.log(markdownTable(['setup', 'clients lost', 'messages sent', 'missing (all clients)', 'missing, each run', 'missing per client (mean)', 'missing per client (max)', 'duplicates', 'out of order', 'longest outage s', 'reconnects', 'recovered', 'reload ms'], rows))
  console.log(`
Definitions. **Sent**: a message whose acknowledgement the sender received (the server ran \`io.to(room).emit()\` for it); one whose ack did not come back (the sender was cut by the reload, or ${ACK_TIMEOUT_MS / 1000} s passed) is "unsure" and counts neither as sent nor, if it arrives, as a duplicate. **Missing**: for each client, the sent messages it never received (while it was disconnected included), summed over the ${CLIENTS} clients (mean and max per client beside it). **Clients lost**: not connected at the end (after up to 10 s for the last reconnections). **Duplicates**: receipts of a number the client already had. **Out of order**: a new number lower than the highest the client had already received. **Longest outage**: the longest time one client spent disconnected (to the end of the run if it never came back). **Reconnects**: 'connect' events after each client's first, summed; **recovered**: those with \`socket.recovered\` true. **Reload ms**: median duration of a reload (clusterize: its \`reload:done\` result; anchor: SIGUSR2 to the last old worker's exit).`)
  const unsure = SETUPS.map(([kind]) => `${kind} ${median(results.get(kind).map((x) => x.unsure))}`).join(', ')
  const failed = SETUPS.filter(([kind]) => results.get(kind).some((x) => !x.reloadsOk)).map(([kind]) => kind)
  console.log(`\nUnsure messages per run (median): ${unsure}.${failed.length ? ' Reloads that did not report ok: ' + failed.join(', ') + '.' : ''}`)
}

if (process.argv[2] === 'server') {
  runServer(process.argv[3], Number(process.argv[4]))
} else {
  main().catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
}
