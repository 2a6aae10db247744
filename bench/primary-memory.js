'use strict'

/**
 * bench/primary-memory.js: what the state the primary holds costs it in memory,
 * per item, through the primary's own data structures (no cluster, no IPC):
 *
 * - a cluster-store session (SessionBackend.set): a logged-in express-session
 *   record of about 240 bytes of JSON, keyed by a 32-character session id;
 * - the store at its default byte bound: 10 KiB sessions up to
 *   clusterStore.maxTotalBytes (128 MiB of JSON; the count is fixed by the bound);
 * - the same with a read lease (SessionLeases: its record, granted twice);
 * - a rate-limit client (RateLimitCounters.increment): key `rl:1:<IPv4>`;
 * - a socket.io recovery session (NamespaceState.persist): a disconnected
 *   socket with its own room and a little `socket.data`.
 *
 * Each kind is measured in a fresh child process started with --expose-gc:
 * heapUsed and RSS after a full GC, before and after adding N items; the cost
 * per item is the difference over N. RSS includes what V8 reserved and did not
 * give back, so it is the figure to budget with; the heap figure is what the
 * items themselves hold.
 *
 *   node bench/primary-memory.js [--items 100000] [--quick]   (--quick: 20,000 items)
 *
 * One process at a time, a few seconds each; nothing listens, nothing is left running.
 */

const { fork } = require('child_process')
const { numberArg: arg } = require('./lib/args')
const { markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')

const ITEMS = arg('--items', 100000, 20000)
const MiB = 1024 * 1024

const KINDS = {
  session: 'cluster-store session (~240 B of JSON)',
  bigSession: 'cluster-store session of 10 KiB, up to maxTotalBytes (128 MiB)',
  leasedSession: 'cluster-store session with a read lease record',
  rateLimitKey: 'rate-limit client (key rl:1:<IPv4>)',
  recoverySession: 'socket.io recovery session (disconnected socket)'
}

/** In the child: build `count` items of `kind`, and report the memory before and after. */
function measure (kind, count) {
  const gc = global.gc
  const sample = () => {
    gc()
    gc()
    const m = process.memoryUsage()
    return { heap: m.heapUsed, rss: m.rss }
  }
  const hold = []
  const fill = fillerOf(kind, hold)
  // Load the modules and warm their code paths before the first sample.
  fill(0, 100)
  const before = sample()
  fill(100, count + 100)
  const after = sample()
  process.send({ kind, count, heap: after.heap - before.heap, rss: after.rss - before.rss, kept: hold.length })
}

function fillerOf (kind, hold) {
  const expires = Date.now() + 86400000
  const sid = (i) => ('s' + i.toString(36)).padEnd(32, 'x')
  const json = (i) => JSON.stringify({
    cookie: { originalMaxAge: 86400000, expires: new Date(expires).toISOString(), secure: false, httpOnly: true, path: '/', sameSite: 'lax' },
    user: { id: i, name: 'user' + i, role: 'member' },
    visits: i % 50,
    csrfSecret: 'x'.repeat(24)
  })
  if (kind === 'bigSession') {
    const { SessionBackend } = require('../lib/session/cluster-backend')
    const backend = new SessionBackend({ sweepIntervalMs: 0 })
    hold.push(backend)
    const padding = 'x'.repeat(10 * 1024 - 250)
    return function fillBig (from, to) {
      for (let i = from; i < to; i++) backend.set(sid(i), JSON.stringify({ n: i, padding }), expires, '')
    }
  }
  if (kind === 'session' || kind === 'leasedSession') {
    const { SessionBackend } = require('../lib/session/cluster-backend')
    const { SessionLeases } = require('../lib/session/leases')
    const backend = new SessionBackend({ sweepIntervalMs: 0, maxSessions: 10000000, maxTotalBytes: 4 * 1024 * MiB })
    const leases = kind === 'leasedSession' ? new SessionLeases({ leaseMs: 1000, push: () => true }) : null
    hold.push(backend, leases)
    return function fillSessions (from, to) {
      for (let i = from; i < to; i++) {
        const key = sid(i)
        backend.set(key, json(i), expires, '')
        if (leases !== null) {
          leases.grant(key, 1001)
          leases.grant(key, 1001)
        }
      }
    }
  }
  if (kind === 'rateLimitKey') {
    const { RateLimitCounters } = require('../lib/state/rate-limit-counters')
    const counters = new RateLimitCounters({ maxKeys: 10000000 })
    hold.push(counters)
    return function fillKeys (from, to) {
      for (let i = from; i < to; i++) counters.increment(`rl:1:10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, 60000)
    }
  }
  if (kind === 'recoverySession') {
    const { NamespaceState } = require('../lib/realtime/recovery-log')
    const state = new NamespaceState('/', { maxPackets: 10000, maxSessions: 10000000 })
    hold.push(state)
    const now = Date.now()
    return function fillRecovery (from, to) {
      for (let i = from; i < to; i++) {
        const id = ('p' + i.toString(36)).padEnd(20, 'y')
        state.persist({ sid: id.replace('p', 's'), pid: id, rooms: [id.replace('p', 's'), 'lobby'], data: { user: 'user' + i } }, now)
      }
    }
  }
  throw new Error(`unknown kind ${kind}`)
}

function runChild (kind) {
  return new Promise((resolve, reject) => {
    const count = kind === 'bigSession' ? Math.floor(128 * MiB / (10 * 1024)) - 100 : ITEMS
    const child = fork(__filename, ['--child', kind, String(count)], { execArgv: ['--expose-gc'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    let result = null
    child.on('message', (message) => { result = message })
    child.on('error', reject)
    child.on('exit', (code) => (result ? resolve(result) : reject(new Error(`${kind}: child exited with ${code} and no result`))))
    child.on('message', () => child.disconnect())
  })
}

async function main () {
  const rows = []
  for (const kind of Object.keys(KINDS)) {
    const r = await runChild(kind)
    rows.push([KINDS[kind], r.count.toLocaleString('en'), Math.round(r.heap / r.count), Math.round(r.rss / r.count), (r.rss / MiB).toFixed(1)])
  }
  console.log(`### The primary's memory per item (${ITEMS.toLocaleString('en')} items each)\n`)
  console.log(markdownTable(['item', 'items', 'heap bytes / item', 'RSS bytes / item', 'RSS growth (MiB)'], rows))
  console.log('\n' + machineLine())
}

if (process.argv[2] === '--child') {
  measure(process.argv[3], Number(process.argv[4]))
} else {
  main().catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
}
