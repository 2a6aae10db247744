'use strict'

/**
 * bench/flood.js: a flood of idle connections against a small open-file
 * limit. Every server runs under `ulimit -n 256` with 2 workers; each round
 * opens 800 sockets at once (400 that send nothing, 400 that send half a
 * request head), then 20 normal clients ask for GET / one after another, a
 * new connection each. Side by side, order rotated every round:
 * raw node:cluster (its own round robin, the anchor, as PM2's cluster mode
 * runs) against clusterize 'rr' (the default) and 'balanced'.
 *
 * Reported: the most descriptors the primary held (read from /proc every
 * 2 ms while the flood arrives), the normal clients served, and how many of
 * the flood's sockets the server closed. What fails is the measure here, not
 * speed.
 *
 *   node bench/flood.js [--rounds 3] [--limit 256] [--flood 800] [--clients 20]
 *
 * Loopback only, ~1 min (~20 s --quick), stops every process it started by PID.
 */

const fs = require('fs')
const net = require('net')
const path = require('path')
const { numberArg: arg } = require('./lib/args')
const { median, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, startProcess, waitForLine, stopProcess, freePort, sleep } = require('./lib/proc')

const ROUNDS = arg('--rounds', 3, 1)
const LIMIT = arg('--limit', 256)
const FLOOD = arg('--flood', 800)
const CLIENTS = arg('--clients', 20)
/** A normal client on loopback is answered in milliseconds when it is answered at all. */
const CLIENT_TIMEOUT_MS = arg('--client-timeout-ms', 5000, 2000)
/** A server that let this many normal clients time out in a row is not asked again (a stuck round took 100 s). */
const GIVE_UP_AFTER = 2
const HALF_REQUEST = 'GET / HTTP/1.1\r\nHost: x\r\n'
const SERVERS = path.join(__dirname, 'lib', 'servers.js')

const CONTENDERS = [
  { label: 'raw node:cluster (Node round robin)', kind: 'cluster' },
  { label: "clusterize 'rr' (default)", kind: 'clusterize', options: { workers: 2 } },
  { label: "clusterize 'balanced'", kind: 'clusterize', options: { workers: 2, scheduling: 'balanced' } }
]

/** Start a server under `ulimit -n LIMIT`: sh sets it and execs node in its place (same pid). */
async function start (spec) {
  const port = await freePort()
  const args = ['-c', `ulimit -n ${LIMIT} && exec "$0" "$@"`, process.execPath, SERVERS, spec.kind, String(port), 'hello']
  if (spec.options) args.push(JSON.stringify(spec.options))
  const proc = startProcess({ node: '/bin/sh', args, env: { BENCH_WORKERS: '2' }, name: spec.label })
  await waitForLine(proc, /^READY /, 30000)
  return { proc, port }
}

function openDescriptors (pid) {
  try {
    return fs.readdirSync(`/proc/${pid}/fd`).length
  } catch {
    return 0
  }
}

/** Open `count` sockets at once; resolves when each connected or failed. */
function openFlood (port, count) {
  const sockets = []
  const opened = Array.from({ length: count }, (_, i) => new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    const entry = { socket, closed: false }
    sockets.push(entry)
    socket.on('error', () => {})
    socket.on('close', () => {
      entry.closed = true
      resolve()
    })
    socket.on('connect', () => {
      if (i % 2 === 1) socket.write(HALF_REQUEST)
      resolve()
    })
  }))
  return { sockets, opened: Promise.all(opened) }
}

/** One GET / on a new connection: 'ok' for a 200, else what went wrong. */
function normalRequest (port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'))
    let head = ''
    const timer = setTimeout(() => {
      socket.destroy()
      resolve('timeout')
    }, CLIENT_TIMEOUT_MS)
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => { head += chunk })
    socket.on('error', (err) => {
      clearTimeout(timer)
      resolve(err.code || 'error')
    })
    socket.on('close', () => {
      clearTimeout(timer)
      resolve(head.startsWith('HTTP/1.1 200') ? 'ok' : head === '' ? 'closed' : head.slice(9, 12))
    })
  })
}

async function round (spec) {
  const server = await start(spec)
  let peak = openDescriptors(server.proc.pid)
  const sampler = setInterval(() => { peak = Math.max(peak, openDescriptors(server.proc.pid)) }, 2)
  const flood = openFlood(server.port, FLOOD)
  try {
    await flood.opened
    // Let the server take the backlog before the normal clients come.
    await sleep(1000)
    const outcomes = []
    let timeoutsInARow = 0
    for (let i = 0; i < CLIENTS; i++) {
      if (timeoutsInARow >= GIVE_UP_AFTER) {
        outcomes.push('not tried')
        continue
      }
      const outcome = await normalRequest(server.port)
      timeoutsInARow = outcome === 'timeout' ? timeoutsInARow + 1 : 0
      outcomes.push(outcome)
    }
    clearInterval(sampler)
    const failures = {}
    for (const outcome of outcomes) if (outcome !== 'ok') failures[outcome] = (failures[outcome] || 0) + 1
    return {
      peak,
      served: outcomes.filter((o) => o === 'ok').length,
      failures,
      floodClosed: flood.sockets.filter((e) => e.closed).length
    }
  } finally {
    clearInterval(sampler)
    for (const entry of flood.sockets) entry.socket.destroy()
    await stopProcess(server.proc, 10000)
  }
}

async function main () {
  installCleanup()
  const results = new Map(CONTENDERS.map((c) => [c.label, []]))
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < CONTENDERS.length; i++) {
      const spec = CONTENDERS[(i + r) % CONTENDERS.length]
      const result = await round(spec)
      results.get(spec.label).push(result)
      process.stderr.write(`round ${r + 1} ${spec.label}: ${JSON.stringify(result)}\n`)
    }
  }
  console.log(`## A flood of idle connections under ulimit -n ${LIMIT} (${FLOOD} sockets at once, 2 workers each)\n`)
  console.log(machineLine())
  console.log(`\nHalf the flood's sockets send nothing, half send half a request head; 1 s later ${CLIENTS} normal clients ask for GET / one after another, ` +
    `a new connection each (${CLIENT_TIMEOUT_MS / 1000} s timeout; after ${GIVE_UP_AFTER} timeouts in a row the rest are counted as not tried). ${ROUNDS} rounds, order rotated; per round values. The primary's descriptors are read from /proc every 2 ms ` +
    '(a peak between two reads can be missed, so the column is a lower bound).\n')
  const rows = CONTENDERS.map((c) => {
    const rs = results.get(c.label)
    const failures = {}
    for (const r of rs) for (const [kind, n] of Object.entries(r.failures)) failures[kind] = (failures[kind] || 0) + n
    return [c.label,
      rs.map((r) => r.peak).join(' / '),
      `${fmt(median(rs.map((r) => r.served)), 0)} of ${CLIENTS}`,
      rs.map((r) => r.served).join(' / '),
      Object.entries(failures).map(([kind, n]) => `${kind} ${n}`).join(', ') || '-',
      rs.map((r) => r.floodClosed).join(' / ')]
  })
  console.log(markdownTable(['server', `primary's peak descriptors (of ${LIMIT}), per round`, 'normal clients served, median', 'per round', 'failures, all rounds', 'flood sockets the server closed, per round'], rows))
}

main().then(() => process.exit(0), (err) => {
  process.stderr.write(err.stack + '\n')
  process.exit(1)
})
