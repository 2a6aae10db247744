'use strict'

/**
 * bench/reload.js: two rolling reloads under keep-alive load (~20 s per
 * contender), side by side: clusterize (SIGUSR2 to the primary), PM2
 * (`pm2 reload`) and the textbook SIGUSR2 rolling restart (fork new, on its
 * 'listening' disconnect the old). Counts failed requests (connection
 * errors/resets + non-2xx) and compares p99 inside the reload windows with
 * steady state.
 *
 *   node bench/reload.js [--seconds 20] [--concurrency 20] [--reloads 2]  (--quick: one reload)
 *   node bench/reload.js --broken-only [--faults crash300,crash1000,hang,leak]
 *
 * Loopback only, ~75 s, stops everything it started by PID, PM2 by `pm2 kill`.
 */

const { numberArg: arg, isQuick } = require('./lib/args')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startLocal, startPm2 } = require('./lib/contenders')
const { runClientLoop, percentile, requestTimeoutArg } = require('./lib/load')
const { DEFAULTS } = require('../lib/config')
const { fmt, ratio, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, waitForLine, sleep } = require('./lib/proc')

const SECONDS = arg('--seconds', 20, 6)
const CONCURRENCY = arg('--concurrency', 20)
const FIRST_RELOAD_AT_MS = isQuick() ? 2000 : 4000
const GAP_MS = isQuick() ? 1500 : 3000
/** Rolling reloads per contender (--quick: one). */
const RELOADS = arg('--reloads', 2, 1)
/**
 * clusterize's reload.bakeMs for the reload table: its default 5 s per worker
 * (a reload of 2 workers takes ~10 s) unless --bake-ms; --quick bakes 1 s,
 * which shortens the wait, not the replacement the table measures.
 */
const DEFAULT_BAKE_MS = DEFAULTS.reload.bakeMs
const BAKE_MS = arg('--bake-ms', DEFAULT_BAKE_MS, 1000)
const REQUEST_TIMEOUT_MS = requestTimeoutArg()
const WORKERS = os.availableParallelism()
const BROKEN_SECONDS = arg('--broken-seconds', 12, 6)
const PAUSING_CLIENTS = arg('--pausing-clients', 40, 20)
const PAUSING_RELOADS = arg('--pausing-reloads', 3, 1)
/** --pausing-only: run just the last table (it takes ~1 min instead of ~4). */
const PAUSING_ONLY = process.argv.includes('--pausing-only')
/** --broken-only: just the broken-reload table; --faults crash300,hang,leak picks its rows. */
const BROKEN_ONLY = process.argv.includes('--broken-only')
const BROKEN_RELOAD_AT_MS = 3000
const FAULT_DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-bench-reload-'))
const CRASH_FILE = path.join(FAULT_DIR, 'crash-after-ms')
const HANG_FILE = path.join(FAULT_DIR, 'hang-after-ms')
const LEAK_FILE = path.join(FAULT_DIR, 'leak-mb-per-s')
const FAULT_ENV = { BENCH_CRASH_FILE: CRASH_FILE, BENCH_HANG_FILE: HANG_FILE, BENCH_LEAK_FILE: LEAK_FILE }

/**
 * The broken deploys: the new code passes any readiness check, then fails.
 * execArgv applies to every contender's processes for that row (old code included).
 */
const ALL_FAULTS = [
  { name: 'crash300', file: CRASH_FILE, content: '300', label: 'crashes 300 ms after boot' },
  { name: 'crash1000', file: CRASH_FILE, content: '1000', label: 'crashes 1 s after boot' },
  { name: 'hang', file: HANG_FILE, content: '1000', label: 'hangs (`for(;;){}`) 1 s after boot' },
  { name: 'leak', file: LEAK_FILE, content: '70', label: 'leaks 70 MB/s, heap 256 MB', execArgv: ['--max-old-space-size=256'] }
]
const FAULTS_ARG = process.argv[process.argv.indexOf('--faults') + 1]
const FAULTS = process.argv.includes('--faults') ? ALL_FAULTS.filter((f) => FAULTS_ARG.split(',').includes(f.name)) : ALL_FAULTS
process.once('exit', function removeFaultDir () {
  fs.rmSync(FAULT_DIR, { recursive: true, force: true })
})

/** Reload by signal and wait for the server's "RELOAD_DONE" line. */
function signalReloader (contender) {
  let seen = 0
  return async function reload () {
    const before = contender.proc.lines.filter((l) => l.startsWith('RELOAD_DONE')).length
    seen = Math.max(seen, before)
    contender.signal('SIGUSR2')
    const target = seen + 1
    await waitUntil(() => contender.proc.lines.filter((l) => l.startsWith('RELOAD_DONE')).length >= target, 60000)
    seen = target
    return contender.proc.lines.filter((l) => l.startsWith('RELOAD_DONE'))[target - 1].slice('RELOAD_DONE '.length)
  }
}

async function waitUntil (check, timeoutMs) {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out waiting for reload')
    await sleep(20)
  }
}

async function reloadUnderLoad (contender, reload) {
  const pidsBefore = await contender.workerPids()
  const windows = []
  const load = runClientLoop({ port: contender.port, concurrency: CONCURRENCY, durationMs: SECONDS * 1000, timeoutMs: REQUEST_TIMEOUT_MS })
  const reloads = (async () => {
    await sleep(FIRST_RELOAD_AT_MS)
    for (let i = 0; i < RELOADS; i++) {
      if (i > 0) await sleep(GAP_MS)
      const start = Date.now()
      const detail = await reload()
      windows.push({ start, end: Date.now(), detail })
    }
  })()
  const [result] = await Promise.all([load, reloads])
  const pidsAfter = await contender.workerPids()
  const replaced = pidsAfter.filter((pid) => !pidsBefore.includes(pid)).length
  return summarize(contender.label, result, windows, replaced, pidsAfter.length)
}

function summarize (label, result, windows, replaced, workers) {
  const inWindow = (s) => windows.some((w) => s.start >= w.start && s.start <= w.end)
  const okDuring = []
  const okSteady = []
  let failed = 0
  for (const s of result.samples) {
    if (!s.ok) failed++
    else if (inWindow(s)) okDuring.push(s.ms)
    else okSteady.push(s.ms)
  }
  return {
    label,
    total: result.samples.length,
    failed,
    errors: Object.entries(result.errors).map(([k, v]) => `${k} ${v}`).join(', ') || '-',
    steadyP99: percentile(okSteady, 99),
    reloadP99: percentile(okDuring, 99),
    reloadMs: windows.map((w) => w.end - w.start).join(' + '),
    replaced: `${replaced}/${workers}`
  }
}

/**
 * One reload into code that crashes, hangs or leaks after boot, under load.
 * The reload is not awaited: PM2 and the textbook restart may never report.
 */
async function brokenReloadUnderLoad (contender, reload, fault) {
  const load = runClientLoop({ port: contender.port, concurrency: CONCURRENCY, durationMs: BROKEN_SECONDS * 1000 })
  let detail = 'no report'
  await sleep(BROKEN_RELOAD_AT_MS)
  fs.writeFileSync(fault.file, fault.content)
  const reloadAt = Date.now()
  Promise.resolve().then(reload).then((d) => { detail = summarizeDetail(d) }, (err) => { detail = 'failed: ' + err.message.split('\n')[0] })
  const result = await load
  const lastSecond = result.samples.filter((s) => s.start >= reloadAt + (BROKEN_SECONDS * 1000 - BROKEN_RELOAD_AT_MS) - 1000)
  const failedAfter = result.samples.filter((s) => s.start >= reloadAt && !s.ok).length
  return {
    label: contender.label,
    fault: fault.label,
    alive: contender.isAlive ? await contender.isAlive() : null,
    total: result.samples.length,
    failed: failedAfter,
    errors: Object.entries(result.errors).map(([k, v]) => `${k} ${v}`).join(', ') || '-',
    servingAtEnd: lastSecond.length > 0 && lastSecond.every((s) => s.ok) ? 'yes' : `no (${lastSecond.filter((s) => !s.ok).length}/${lastSecond.length} failed in the last second)`,
    detail
  }
}

/**
 * Keep-alive clients that pause 0.8-1.2 s between requests (each on its own
 * connection, as a browser tab polling would), across several reloads: how
 * many of their requests hit a connection the server was closing.
 */
async function pausingClientsAcrossReloads (contender, reload) {
  const http = require('http')
  const errors = {}
  let ok = 0
  let stop = false
  const client = async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
    while (!stop) {
      const outcome = await new Promise((resolve) => {
        const req = http.get({ host: '127.0.0.1', port: contender.port, path: '/', agent, timeout: 10000 }, (res) => {
          res.resume()
          res.on('end', () => resolve(res.statusCode === 200 ? null : 'HTTP ' + res.statusCode))
        })
        req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })))
        req.on('error', (err) => resolve(err.code || err.message))
      })
      if (outcome === null) ok++
      else errors[outcome] = (errors[outcome] || 0) + 1
      await sleep(800 + Math.random() * 400)
    }
    agent.destroy()
  }
  const loops = Array.from({ length: PAUSING_CLIENTS }, client)
  await sleep(3000)
  for (let i = 0; i < PAUSING_RELOADS; i++) {
    await Promise.resolve().then(reload).catch(() => {})
    await sleep(3000)
  }
  stop = true
  await Promise.all(loops)
  const failed = Object.values(errors).reduce((a, b) => a + b, 0)
  return { label: contender.label, ok, failed, errors: Object.entries(errors).map(([k, v]) => `${k} ${v}`).join(', ') || '-' }
}

function summarizeDetail (detail) {
  if (typeof detail !== 'string' || !detail.startsWith('{')) return 'reported done'
  try {
    const result = JSON.parse(detail)
    if (result.ok) return 'reported ok'
    // What failed, without the worker's name: "exited with SIGABRT ...", "heap grows 80 MB/s ...", "sent no heartbeat ...".
    const why = String(result.reason || '').replace(/^worker \d+ \(generation \d+\) /, '').split(/[:(]/)[0].trim()
    return `ok: false, rolledBack: ${result.rolledBack} (${why})`
  } catch {
    return detail.slice(0, 60)
  }
}

function clearFaults () {
  for (const file of [CRASH_FILE, HANG_FILE, LEAK_FILE]) fs.rmSync(file, { force: true })
}

async function runContender (start, makeReload, fault, pausing) {
  let contender = null
  try {
    clearFaults()
    contender = await start(fault, !fault && !pausing)
    await sleep(isQuick() ? 500 : 1000)
    if (pausing) return await pausingClientsAcrossReloads(contender, makeReload(contender))
    if (fault) return await brokenReloadUnderLoad(contender, makeReload(contender), fault)
    return await reloadUnderLoad(contender, makeReload(contender))
  } catch (err) {
    console.error(`skipped: ${err.message}`)
    return null
  } finally {
    if (contender) await contender.stop()
    clearFaults()
  }
}

const CONTENDERS = [
  {
    // reloadTable: the reload-under-load table, the only one that takes BAKE_MS (the others run the defaults).
    start: function startClusterize (fault, reloadTable) {
      const baked = reloadTable && BAKE_MS !== DEFAULT_BAKE_MS
      return startLocal('clusterize', {
        label: baked ? `clusterize (SIGUSR2, reload.bakeMs ${BAKE_MS})` : 'clusterize (SIGUSR2)',
        env: FAULT_ENV,
        execArgv: fault && fault.execArgv,
        options: baked ? { reload: { bakeMs: BAKE_MS } } : undefined
      })
    },
    reloader: (c) => signalReloader(c)
  },
  {
    start: (fault) => startPm2({ instances: WORKERS, label: 'PM2 `pm2 reload`', env: FAULT_ENV, execArgv: fault && fault.execArgv }),
    reloader: (c) => () => c.reload()
  },
  {
    start: (fault) => startLocal('cluster', { label: 'textbook SIGUSR2 rolling restart', env: FAULT_ENV, execArgv: fault && fault.execArgv }),
    reloader: (c) => signalReloader(c)
  }
]

async function main () {
  installCleanup()
  const broken = []
  if (BROKEN_ONLY) {
    for (const fault of FAULTS) {
      for (const contender of CONTENDERS) broken.push(await runContender(contender.start, contender.reloader, fault))
    }
    console.log(machineLine())
    return printBroken(broken)
  }
  const pausing = []
  // --quick: the reload table only.
  if (!isQuick() || PAUSING_ONLY) {
    for (const contender of CONTENDERS) pausing.push(await runContender(contender.start, contender.reloader, null, true))
  }
  if (PAUSING_ONLY) return printPausing(pausing)
  const rows = []
  for (const contender of CONTENDERS) rows.push(await runContender(contender.start, contender.reloader))
  const done = rows.filter(Boolean)
  for (const fault of isQuick() ? [] : FAULTS) {
    for (const contender of CONTENDERS) broken.push(await runContender(contender.start, contender.reloader, fault))
  }

  console.log(`## Reload under load: ${RELOADS === 1 ? 'one rolling reload' : RELOADS + ' rolling reloads'} in ${SECONDS} s (${WORKERS} workers each)\n`)
  console.log(machineLine())
  console.log(`\n${CONCURRENCY} concurrent keep-alive client loops (node:http Agent), ${RELOADS === 1 ? `the reload at ~${FIRST_RELOAD_AT_MS / 1000} s` : `reloads at ~${FIRST_RELOAD_AT_MS / 1000} s, each next one ${GAP_MS / 1000} s after the last completes`}. ` +
    `failed = connection errors/resets, requests unanswered after ${REQUEST_TIMEOUT_MS / 1000} s, and non-2xx. "reload window" = from the signal/command until the reload reports done. ` +
    (BAKE_MS !== DEFAULT_BAKE_MS ? `clusterize reloads with \`reload.bakeMs\` ${BAKE_MS} (the default, ${DEFAULT_BAKE_MS}, waits that many ms per worker before the next; it adds time, not work). ` : '') +
    'The client runs on the same cores as the servers.\n')
  console.log(markdownTable(
    ['contender', 'requests', 'failed', 'failure kinds', 'p99 steady ms', 'p99 during reload ms', 'reload / steady p99', 'reload durations ms', 'workers replaced'],
    done.map((r) => [r.label, fmt(r.total), r.failed, r.errors, fmt(r.steadyP99, 1), fmt(r.reloadP99, 1), ratio(r.reloadP99, r.steadyP99), r.reloadMs, r.replaced])))

  if (broken.length) printBroken(broken)
  if (pausing.length) printPausing(pausing)
}

function printBroken (broken) {
  console.log(`\n## Broken reloads: the new code crashes, hangs or leaks after it boots (${BROKEN_SECONDS} s of load, reload at ${BROKEN_RELOAD_AT_MS / 1000} s)\n`)
  console.log('Same load. The deployed code passes any readiness check, then throws 300 ms (or 1 s) after boot, blocks its event loop for good 1 s after boot, ' +
    'or leaks 70 MB/s on a 256 MB heap (`--max-old-space-size=256` for every process of that row). ' +
    '"failed" counts requests started after the reload signal that failed (a hung worker\'s requests time out after 10 s). ' +
    '"primary alive" is whether the supervising process (clusterize primary, PM2 daemon, textbook primary) still runs at the end. ' +
    'clusterize runs with its defaults (`reload.bakeMs` 5000, `reload.heartbeatTimeoutMs` 3000, `health.maxHeapRatio` 0.9).\n')
  console.log(markdownTable(
    ['contender', 'new code', 'requests', 'failed after the reload', 'failure kinds', 'still serving at the end', 'primary alive', 'reload result'],
    broken.filter(Boolean).map((r) => [r.label, r.fault, fmt(r.total), fmt(r.failed), r.errors, r.servingAtEnd, r.alive === null ? '-' : (r.alive ? 'yes' : 'no'), r.detail])))
}

function printPausing (pausing) {
  console.log(`\n## Keep-alive clients that pause about a second between requests, ${PAUSING_RELOADS} reloads\n`)
  console.log(`${PAUSING_CLIENTS} clients, each on its own keep-alive connection (node:http Agent), pausing 0.8-1.2 s between requests; a reload every ~3 s. ` +
    'A failure here is a request sent on a connection the server was closing at that moment.\n')
  console.log(markdownTable(
    ['contender', 'requests answered', 'failed', 'failure kinds'],
    pausing.filter(Boolean).map((r) => [r.label, fmt(r.ok), fmt(r.failed), r.errors])))
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
