'use strict'

/**
 * bench/side-by-side.js: every anchor and every scheduling mode in one run,
 * on the same app, the same Node and the same load generator:
 * raw node:cluster, PM2 7 cluster mode, Watt (wattpm, worker threads with
 * SO_REUSEPORT; installed on demand into bench/.tmp/watt, see lib/watt.js),
 * clusterize with no `scheduling` option (what a user gets) and with each mode.
 *
 * 1. 2 workers each: keep-alive and `Connection: close` req/s, p50/p99 (wrk
 *    -t1 -c50, the issues' outside measurement), rounds interleaved with the
 *    order drawn anew each round, medians; RSS and PSS of each contender's whole process
 *    tree idle and after the load.
 * 2. 4 workers each: 100 keep-alive connections opened at once, how many each
 *    worker got (max/min); the trees' memory again, idle and after a short
 *    load, so the memory one more worker costs is (4-worker tree - 2-worker
 *    tree) / 2, for processes and Watt's threads alike.
 *
 *   node bench/side-by-side.js [--rounds 3] [--seconds 3] [--balance-rounds 5] [--no-watt] [--no-pm2] [--semi-space 8,4] [--settle-seconds 3]
 *
 * Loopback only, ~5 min (--quick ~2), stops every process it started by PID
 * (PM2 by `pm2 kill` in a private PM2_HOME). Measures only.
 */

const http = require('http')
const os = require('os')
const { numberArg: arg, isQuick } = require('./lib/args')
const { startLocal, startPm2 } = require('./lib/contenders')
const { startWatt } = require('./lib/watt')
const { median, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { shuffled } = require('./lib/rounds')
const { installCleanup, node24, sleep, rssMiB } = require('./lib/proc')
const { hasWrk, wrkRun, wrkClose, wrkSeconds } = require('./lib/wrk')

const ROUNDS = arg('--rounds', 3, 2)
const SECONDS = arg('--seconds', 3, 1)
const BALANCE_ROUNDS = arg('--balance-rounds', 5, 2)
const CONNECTIONS = 50
const BALANCE_CONNECTIONS = 100
const PAUSE_MS = arg('--pause-ms', 300, 100)
const WARM_UP_SECONDS = 1
/**
 * More load before the measured rounds (after the idle memory is read): in a
 * first round every contender's p99 read 2-4x its later ones (heaps still
 * growing, code still compiling), which made the keep-alive p99 row a draw
 * of who ran first.
 */
const SETTLE_SECONDS = arg('--settle-seconds', 3, 0)
const NODE = node24() || process.execPath
const WITH_WATT = !process.argv.includes('--no-watt')
const WITH_PM2 = !process.argv.includes('--no-pm2')
const RAW = 'raw node:cluster'
/** --semi-space 8,4: rows of the default with another young-generation size (option maxSemiSpaceMB) beside the shipped one. */
const SEMI_SPACES = semiSpaceArg()

function semiSpaceArg () {
  const at = process.argv.indexOf('--semi-space')
  if (at < 0) return []
  const parts = String(process.argv[at + 1] || '').split(',')
  // Number('') is 0: an empty part (or no value at all) must not pass as "V8's default".
  const list = parts.map((part) => part.trim() === '' ? NaN : Number(part))
  if (!list.every((mb) => Number.isInteger(mb) && mb >= 0 && mb <= 1024)) {
    throw new Error('--semi-space takes a comma-separated list of sizes in MB (0 = V8\'s default), e.g. --semi-space 8,4')
  }
  return list
}

/** The contenders of one set, each with `workers` workers. */
function specs (workers, modes) {
  const list = [{ label: RAW, start: () => startLocal('cluster', { node: NODE, label: RAW, env: { BENCH_WORKERS: String(workers) } }) }]
  if (WITH_PM2) list.push({ label: 'PM2 7 cluster mode', optional: true, start: () => startPm2({ instances: workers, label: 'PM2 7 cluster mode' }) })
  if (WITH_WATT) list.push({ label: 'Watt', optional: true, start: () => startWatt({ workers, node: NODE }) })
  for (const mode of modes) {
    const options = mode === 'default' ? { workers } : { workers, scheduling: mode }
    list.push({
      label: mode === 'default' ? 'clusterize, no scheduling option' : `clusterize '${mode}'`,
      start: async () => {
        const c = await startLocal('clusterize', { node: NODE, label: mode, options })
        // READY <port> <mode>: name what the default resolved to.
        const resolved = c.readyLine.split(' ')[2]
        c.label = mode === 'default' ? `clusterize, no scheduling option (= '${resolved}')` : `clusterize '${resolved}'`
        return c
      }
    })
  }
  if (workers === 2) {
    for (const mb of SEMI_SPACES) {
      const label = `clusterize, default scheduling, maxSemiSpaceMB: ${mb}`
      list.push({ label, start: () => startLocal('clusterize', { node: NODE, label, options: { workers, maxSemiSpaceMB: mb } }) })
    }
  }
  return list
}

/**
 * Start every spec at once (start-up is not measured); an optional one that
 * fails (no npm access for Watt, PM2 not installed) is left out with a note.
 */
async function startSet (list, contenders, notes) {
  const started = await Promise.allSettled(list.map((spec) => spec.start()))
  started.forEach((result, i) => {
    if (result.status === 'fulfilled') contenders[i] = result.value
    else notes.push(`${list[i].label} left out: ${result.reason.message.split('\n')[0]}`)
  })
  // Keep the specs' order; drop the holes.
  const present = contenders.filter(Boolean)
  contenders.length = 0
  contenders.push(...present)
  const failed = started.find((r, i) => r.status === 'rejected' && !list[i].optional)
  if (failed) throw failed.reason
}

/** Run `fn(contender)` for each contender, `rounds` times, in an order drawn anew each round (lib/rounds.js shuffled()). */
async function interleave (contenders, rounds, fn) {
  const results = new Map(contenders.map((c) => [c, []]))
  for (let round = 0; round < rounds; round++) {
    for (const c of shuffled(contenders, round)) {
      results.get(c).push(await fn(c))
      await sleep(PAUSE_MS)
    }
  }
  return results
}

/** Keep-alive then `Connection: close` load on each contender, unmeasured (SETTLE_SECONDS in all). */
async function settle (contenders) {
  if (SETTLE_SECONDS === 0) return
  const closeSeconds = Math.max(1, Math.round(SETTLE_SECONDS / 3))
  for (const c of contenders) {
    await wrkRun({ port: c.port, connections: CONNECTIONS, seconds: Math.max(1, SETTLE_SECONDS - closeSeconds) })
    await wrkClose({ port: c.port, connections: CONNECTIONS, seconds: closeSeconds })
  }
  await sleep(PAUSE_MS)
}

/** Per-worker process RSS (MiB) of a process-based contender; null for Watt (threads). */
async function workerRss (c) {
  if (!c.workerPids || c.whoPath) return null
  const pids = await c.workerPids()
  const values = pids.map(rssMiB).filter((v) => v !== null)
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null
}

async function memory (c) {
  return Object.assign({ perWorker: await workerRss(c) }, await c.tree())
}

/** Open `n` keep-alive connections at once; how many each worker got, most first (workers that got none count 0). */
async function openAtOnce (c, n, workers) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: n })
  const path = c.whoPath || '/'
  const key = c.whoKey || 'pid'
  try {
    const ids = await Promise.all(Array.from({ length: n }, () => new Promise((resolve, reject) => {
      http.get({ host: '127.0.0.1', port: c.port, path, agent }, (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (chunk) => { body += chunk })
        res.on('end', () => resolve(JSON.parse(body)[key]))
      }).on('error', reject)
    })))
    const counts = new Map()
    for (const id of ids) counts.set(id, (counts.get(id) || 0) + 1)
    const list = [...counts.values()]
    while (list.length < workers) list.push(0)
    return list.sort((a, b) => b - a)
  } finally {
    agent.destroy()
  }
}

/** Watt replaces a worker whose event-loop utilization stays over 0.99 (its default health check): say so when it did, since the run includes it. */
function noteReplacements (contenders, notes, set) {
  for (const c of contenders) {
    const n = c.replacedWorkers ? c.replacedWorkers() : 0
    if (n > 0) notes.push(`${c.label} (${set}) replaced ${n} worker${n === 1 ? '' : 's'} as unhealthy during the run (its default health check), which its figures include.`)
  }
}

function fmtRatio (value) {
  return Number.isFinite(value) ? value.toFixed(2) : 'inf (a worker got none)'
}

async function twoWorkers (notes) {
  const contenders = []
  try {
    await startSet(specs(2, ['default', 'rr', 'none', 'balanced', 'reuseport', 'sticky']), contenders, notes)
    for (const c of contenders) await wrkRun({ port: c.port, connections: CONNECTIONS, seconds: WARM_UP_SECONDS })
    await sleep(1000)
    const idle = new Map()
    for (const c of contenders) idle.set(c, await memory(c))
    await settle(contenders)
    const keepAlive = await interleave(contenders, ROUNDS, (c) => wrkRun({ port: c.port, connections: CONNECTIONS, seconds: SECONDS }))
    const close = await interleave(contenders, ROUNDS, (c) => wrkClose({ port: c.port, connections: CONNECTIONS, seconds: SECONDS }))
    const loaded = new Map()
    for (const c of contenders) loaded.set(c, await memory(c))
    noteReplacements(contenders, notes, '2 workers')
    return { contenders, keepAlive, close, idle, loaded }
  } finally {
    await Promise.all(contenders.map((c) => c.stop()))
  }
}

async function fourWorkers (notes) {
  const contenders = []
  try {
    await startSet(specs(4, ['default', 'rr', 'balanced', 'reuseport']), contenders, notes)
    for (const c of contenders) await wrkRun({ port: c.port, connections: CONNECTIONS, seconds: WARM_UP_SECONDS })
    await sleep(1000)
    const idle = new Map()
    for (const c of contenders) idle.set(c, await memory(c))
    const balance = await interleave(contenders, BALANCE_ROUNDS, (c) => openAtOnce(c, BALANCE_CONNECTIONS, 4))
    for (const c of contenders) await wrkRun({ port: c.port, connections: CONNECTIONS, seconds: SECONDS })
    const loaded = new Map()
    for (const c of contenders) loaded.set(c, await memory(c))
    noteReplacements(contenders, notes, '4 workers')
    return { contenders, balance, idle, loaded }
  } finally {
    await Promise.all(contenders.map((c) => c.stop()))
  }
}

function throughputTable (two) {
  const m = (map, c, key) => median(map.get(c).map((r) => r[key]))
  const find = (label) => two.contenders.find((c) => c.label === label)
  const raw = find(RAW)
  const watt = two.contenders.find((c) => c.whoPath)
  const rows = two.contenders.map((c) => {
    const failed = two.keepAlive.get(c).concat(two.close.get(c)).reduce((n, r) => n + r.failed, 0)
    const vsWatt = (map) => watt ? ratio(m(map, c, 'rps'), m(map, watt, 'rps')) : 'n/a'
    return [c.label,
      fmt(m(two.keepAlive, c, 'rps')), vsWatt(two.keepAlive), ratio(m(two.keepAlive, c, 'rps'), m(two.keepAlive, raw, 'rps')),
      fmt(m(two.keepAlive, c, 'p50'), 2), fmt(m(two.keepAlive, c, 'p99'), 2),
      fmt(m(two.close, c, 'rps')), vsWatt(two.close), ratio(m(two.close, c, 'rps'), m(two.close, raw, 'rps')),
      fmt(m(two.close, c, 'p50'), 2), fmt(m(two.close, c, 'p99'), 2),
      two.keepAlive.get(c).map((r) => fmt(r.rps)).join(' / ') + ' ; ' + two.close.get(c).map((r) => fmt(r.rps)).join(' / '),
      failed]
  })
  return markdownTable(['contender (2 workers)', 'keep-alive req/s', 'vs Watt', 'vs raw', 'p50 ms', 'p99 ms',
    'Connection: close req/s', 'vs Watt', 'vs raw', 'p50 ms', 'p99 ms', 'each round (keep-alive ; close)', 'failed'], rows)
}

function balanceTable (four) {
  return markdownTable(['contender (4 workers)', `connections per worker, each round (${BALANCE_ROUNDS} rounds)`, 'max/min, median', 'max/min, worst'],
    four.contenders.map((c) => {
      const rounds = four.balance.get(c)
      const ratios = rounds.map((counts) => counts[counts.length - 1] > 0 ? counts[0] / counts[counts.length - 1] : Infinity)
      return [c.label, rounds.map((counts) => counts.join('/')).join(', '), fmtRatio(median(ratios)), fmtRatio(Math.max(...ratios))]
    }))
}

/** Contenders of the two sets matched by how they started (the 4-worker set has fewer modes). */
function sameContender (c, list) {
  return list.find((o) => o.label === c.label)
}

function memoryTable (two, four) {
  const watt = two.contenders.find((c) => c.whoPath)
  const wattLoaded = watt ? two.loaded.get(watt).rss : NaN
  const rows = two.contenders.map((c) => {
    const idle = two.idle.get(c)
    const loaded = two.loaded.get(c)
    const big = four ? sameContender(c, four.contenders) : null
    const marginal = (phase, two2) => big ? (four[phase].get(big).rss - two2.rss) / 2 : NaN
    return [c.label, idle.processes, fmt(idle.rss, 0), fmt(loaded.rss, 0), watt ? ratio(loaded.rss, wattLoaded) : 'n/a', fmt(loaded.pss, 0),
      c.whoPath ? '(threads)' : fmt(idle.perWorker, 1) + ' / ' + fmt(loaded.perWorker, 1),
      fmt(marginal('idle', idle), 1) + ' / ' + fmt(marginal('loaded', loaded), 1)]
  })
  return markdownTable(['contender (2 workers)', 'processes', 'tree RSS idle MiB', 'tree RSS after load MiB', 'vs Watt', 'tree PSS after load MiB',
    'RSS per worker process, idle / loaded MiB', 'one more worker (4-worker tree - 2-worker tree) / 2, idle / loaded MiB'], rows)
}

/**
 * Issue #54's goal rows for what a user gets (no scheduling option), from this run:
 * each with its measurement and whether it is met.
 */
function goalTable (two, four) {
  const m = (map, c, key) => median(map.get(c).map((r) => r[key]))
  const isDefault = (c) => c.label.startsWith('clusterize, no scheduling option')
  const mine = two.contenders.find(isDefault)
  const watt = two.contenders.find((c) => c.whoPath)
  const raw = two.contenders.find((c) => c.label === RAW)
  if (!mine || !watt || !raw) return '(needs Watt, raw node:cluster and the default in the run)'
  const rows = []
  const row = (goal, value, met) => rows.push([goal, value, met ? 'met' : '**not met**'])
  const times = (a, b) => a / b
  const closeVsWatt = times(m(two.close, mine, 'rps'), m(two.close, watt, 'rps'))
  row('`Connection: close` req/s >= 0.95x Watt', `${closeVsWatt.toFixed(2)}x`, closeVsWatt >= 0.95)
  const closeVsRaw = times(m(two.close, mine, 'rps'), m(two.close, raw, 'rps'))
  row('`Connection: close` req/s >= 1.7x raw node:cluster', `${closeVsRaw.toFixed(2)}x`, closeVsRaw >= 1.7)
  const keepAliveVsWatt = times(m(two.keepAlive, mine, 'rps'), m(two.keepAlive, watt, 'rps'))
  row('keep-alive req/s >= 0.95x Watt', `${keepAliveVsWatt.toFixed(2)}x`, keepAliveVsWatt >= 0.95)
  for (const [name, map] of [['`Connection: close`', two.close], ['keep-alive', two.keepAlive]]) {
    const mineP99 = m(map, mine, 'p99')
    const wattP99 = m(map, watt, 'p99')
    row(`${name} p99 no worse than Watt's`, `${fmt(mineP99, 2)} vs ${fmt(wattP99, 2)} ms`, mineP99 <= wattP99)
  }
  const mineFour = four ? four.contenders.find(isDefault) : null
  if (mineFour) {
    const ratios = four.balance.get(mineFour).map((counts) => counts[counts.length - 1] > 0 ? counts[0] / counts[counts.length - 1] : Infinity)
    row(`${BALANCE_CONNECTIONS} keep-alive connections over 4 workers, max/min <= 1.3 (median of rounds)`, fmtRatio(median(ratios)), median(ratios) <= 1.3)
  }
  const rssVsWatt = times(two.loaded.get(mine).rss, two.loaded.get(watt).rss)
  row('tree RSS after load <= 0.5x Watt', `${rssVsWatt.toFixed(2)}x (${fmt(two.loaded.get(mine).rss, 0)} vs ${fmt(two.loaded.get(watt).rss, 0)} MiB)`, rssVsWatt <= 0.5)
  return markdownTable(['goal (issue #54), no scheduling option', 'this run', ''], rows)
}

async function main () {
  installCleanup()
  if (!hasWrk()) throw new Error('bench/side-by-side.js needs wrk (Debian/Ubuntu package `wrk`)')
  const loadAtStart = os.loadavg()[0]
  const notes = []
  const two = await twoWorkers(notes)
  const four = await fourWorkers(notes)
  const version = require('child_process').execFileSync(NODE, ['-v'], { encoding: 'utf8' }).trim()
  const watt = two.contenders.find((c) => c.whoPath)
  console.log('## Side by side: Watt, PM2, raw node:cluster and every scheduling mode\n')
  console.log(machineLine(`servers on Node ${version}${watt ? `, wattpm ${watt.version}` : ''}`))
  console.log(`1-minute load average: ${loadAtStart.toFixed(1)} at the start, ${os.loadavg()[0].toFixed(1)} at the end, on ${os.availableParallelism()} cores (wrk shares them with the servers).`)
  for (const note of notes) console.log(`\nNote: ${note}`)
  console.log(`\nGET / on the hello Express app, wrk -t1 -c${CONNECTIONS} -d${wrkSeconds(SECONDS)}s --latency, ${ROUNDS} rounds after ${SETTLE_SECONDS} s of unmeasured load on each contender, in an order drawn anew each round (seeded, the same each run), medians; ` +
    "`Connection: close` = a new TCP connection per request. Ratios against Watt and raw node:cluster from the same run. p50/p99 are wrk's (saturated: they measure queueing on 2 cores as much as the server).\n")
  console.log(throughputTable(two))
  console.log(`\n### Balance: ${BALANCE_CONNECTIONS} keep-alive connections opened at once, 4 workers each\n`)
  console.log('One request on each connection, opened together by one client (Node http agent); the answering worker (pid, or thread for Watt) counted, most first.\n')
  console.log(balanceTable(four))
  console.log('\n### Memory: whole process trees, idle after a 1 s warm-up and after the load above\n')
  console.log('RSS summed over every process of the tree (what `ps` shows; node\'s own pages count once per process), PSS from smaps_rollup (shared pages split). ' +
    'Watt is one process whose workers are threads: its per-worker figure is only the last column, the same arithmetic as for the others.\n')
  console.log(memoryTable(two, four))
  console.log('\n### The default against issue #54\'s goals, this run\n')
  console.log(goalTable(two, four))
  console.log('\nThe memory row asks three processes (a primary and 2 workers) to fit in half of Watt\'s one; raw node:cluster\'s own tree reads 0.67x-1.02x Watt\'s after load in our runs (Watt\'s own RSS after load moved from 354 to 523 MiB between runs). Runs on two boxes, and why: bench/README.md, "Watt, side by side".')
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
