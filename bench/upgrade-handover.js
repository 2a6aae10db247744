'use strict'

/**
 * What handing the socket.io recovery state to a new primary costs during
 * `clusterize upgrade` (lib/realtime/recovery-handover.js through
 * lib/primary/handover.js, as the upgrade does), beside an anchor: a plain
 * batched send of as many express sessions, what the cluster store's
 * handover amounts to. The same IPC channel to a real child process (JSON,
 * as the upgrade's).
 *
 *   sync ms   the old primary's event loop is held while it sends (no request is dispatched meanwhile)
 *   total ms  until the new primary has taken everything
 *
 * Rows: packets in the log (about 150 bytes of JSON each) and persisted
 * sessions (about 120 bytes each), for one namespace at its default bounds
 * (10,000 packets, 100,000 sessions) and below. The session anchor hands
 * the same number of express sessions (about 120 bytes each).
 *
 *   node bench/upgrade-handover.js [--quick] [--rounds N]
 */

const { spawn } = require('child_process')
const { RecoveryService, recoveryHandlers, recoveryService } = require('../lib/realtime/recovery-service')
const { createServiceHost } = require('../lib/services/host')
const { handOverServices } = require('../lib/primary/handover')
const { takeOverServices, holdForHandover } = require('../lib/primary/handover-take')
const { SessionBackend } = require('../lib/session/cluster-backend')

const TAG = '$czUpgrade'

const SESSION_BATCH = 1000

if (process.argv.includes('--child')) child()
else main().catch((err) => { console.error(err); process.exit(1) })

/** A recovery service in a service host, as a primary runs it. */
function recoveryHost (service) {
  return createServiceHost([{ name: 'recovery', handover: recoveryService.handover, start: () => recoveryHandlers(service) }], {})
}

function child () {
  let service = null
  let taking = null
  const backend = new SessionBackend({ maxSessions: 1000000, maxTotalBytes: 1024 * 1024 * 1024 })
  let taken = 0
  function fresh () {
    service = new RecoveryService({ broadcast () {} })
    service.hold()
    const host = recoveryHost(service)
    holdForHandover(host)
    taking = takeOverServices(host, () => {}, TAG)
  }
  fresh()
  process.on('message', (message) => {
    if (taking.onMessage(message)) return
    if (message.kind === 'sessions') taken += backend.restore(message.entries)
    else if (message.kind === 'go') {
      taking.release()
      const stats = service.stats()
      process.send({ done: true, packets: stats.packets, sessions: stats.sessions + taken })
      backend.clear()
      taken = 0
      fresh()
    }
  })
}

function median (values) {
  const sorted = values.slice().sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

function recoveryState (packets, sessions) {
  const service = new RecoveryService({ broadcast () {} })
  const fromThisHost = service.fromThisHost
  service.namespace('/').maxSessions = Math.max(sessions, 1)
  for (let i = 0; i < packets; i++) {
    service.onQueueMessage({ op: 'pub', n: '/', i, m: { uid: 'u', nsp: '/', type: 3, data: { packet: { type: 2, data: ['chat', { from: 'user-' + (i % 1000), text: 'x'.repeat(80), n: i }] }, opts: { rooms: ['room-' + (i % 10)], except: [] } } } }, fromThisHost)
  }
  for (let i = 0; i < sessions; i++) service.persist('/', { sid: 'sid-' + i, pid: 'pid-' + i + '-' + 'p'.repeat(20), rooms: ['sid-' + i, 'room-' + (i % 10)], data: { name: 'user-' + i, since: 1700000000000 } })
  return service
}

function sessionState (sessions) {
  const backend = new SessionBackend({ maxSessions: 1000000, maxTotalBytes: 1024 * 1024 * 1024 })
  const expires = Date.now() + 3600000
  for (let i = 0; i < sessions; i++) backend.restore([['sess:' + i, JSON.stringify({ cookie: { originalMaxAge: 3600000 }, user: 'user-' + i, n: i, pad: 'y'.repeat(40) }), expires, '']])
  return backend
}

function handOff (worker, send) {
  return new Promise((resolve) => {
    const started = process.hrtime.bigint()
    worker.once('message', (message) => resolve({ total: Number(process.hrtime.bigint() - started) / 1e6, sync, message }))
    send()
    worker.send({ kind: 'go' })
    const sync = Number(process.hrtime.bigint() - started) / 1e6
  })
}

async function main () {
  const quick = process.argv.includes('--quick')
  const roundsFlag = process.argv.indexOf('--rounds')
  const rounds = roundsFlag !== -1 ? Number(process.argv[roundsFlag + 1]) : quick ? 3 : 7
  const rows = quick ? [[1000, 1000], [10000, 10000]] : [[1000, 1000], [10000, 10000], [10000, 100000]]
  const worker = spawn(process.execPath, [__filename, '--child'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  console.log(`Node ${process.version}, ${rounds} rounds per row, load average ${require('os').loadavg().map((l) => l.toFixed(2)).join(' ')}\n`)
  console.log('| packets | sessions | recovery sync ms (median / max) | recovery total ms (median / max) | sessions anchor sync ms | sessions anchor total ms | total ratio (median) |')
  console.log('|---:|---:|---:|---:|---:|---:|---:|')
  for (const [packets, sessions] of rows) {
    const ours = { sync: [], total: [] }
    const anchor = { sync: [], total: [] }
    const host = recoveryHost(recoveryState(packets, sessions))
    const backend = sessionState(sessions)
    for (let round = 0; round < rounds; round++) {
      const mine = await handOff(worker, () => {
        handOverServices(host, worker, TAG).stop()
      })
      if (mine.message.packets !== packets || mine.message.sessions !== sessions) throw new Error(`recovery handover took ${JSON.stringify(mine.message)}`)
      ours.sync.push(mine.sync)
      ours.total.push(mine.total)
      const theirs = await handOff(worker, () => {
        const entries = backend.snapshot()
        for (let i = 0; i < entries.length; i += SESSION_BATCH) worker.send({ kind: 'sessions', entries: entries.slice(i, i + SESSION_BATCH) })
      })
      if (theirs.message.sessions !== sessions) throw new Error(`session handover took ${JSON.stringify(theirs.message)}`)
      anchor.sync.push(theirs.sync)
      anchor.total.push(theirs.total)
    }
    const f = (values) => `${median(values).toFixed(1)} / ${Math.max(...values).toFixed(1)}`
    console.log(`| ${packets} | ${sessions} | ${f(ours.sync)} | ${f(ours.total)} | ${f(anchor.sync)} | ${f(anchor.total)} | ${(median(ours.total) / median(anchor.total)).toFixed(2)}x |`)
  }
  worker.kill()
  console.log(`\nload average after: ${require('os').loadavg().map((l) => l.toFixed(2)).join(' ')}`)
}
