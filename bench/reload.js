'use strict'

/**
 * bench/reload.js: two rolling reloads under keep-alive load (~20 s per
 * contender), side by side: clusterize (SIGUSR2 to the primary), PM2
 * (`pm2 reload`) and the textbook SIGUSR2 rolling restart (fork new, on its
 * 'listening' disconnect the old). Counts failed requests (connection
 * errors/resets + non-2xx) and compares p99 inside the reload windows with
 * steady state.
 *
 *   node bench/reload.js [--seconds 20] [--concurrency 20]
 *
 * Loopback only, ~75 s, stops everything it started by PID, PM2 by `pm2 kill`.
 */

const { numberArg: arg } = require('./lib/args')
const os = require('os')
const { startLocal, startPm2 } = require('./lib/contenders')
const { runClientLoop, percentile } = require('./lib/load')
const { fmt, ratio, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, waitForLine, sleep } = require('./lib/proc')

const SECONDS = arg('--seconds', 20)
const CONCURRENCY = arg('--concurrency', 20)
const FIRST_RELOAD_AT_MS = 4000
const GAP_MS = 3000
const WORKERS = os.availableParallelism()

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
  const load = runClientLoop({ port: contender.port, concurrency: CONCURRENCY, durationMs: SECONDS * 1000 })
  const reloads = (async () => {
    await sleep(FIRST_RELOAD_AT_MS)
    for (let i = 0; i < 2; i++) {
      const start = Date.now()
      const detail = await reload()
      windows.push({ start, end: Date.now(), detail })
      await sleep(GAP_MS)
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

async function runContender (start, makeReload) {
  let contender = null
  try {
    contender = await start()
    await sleep(1000)
    return await reloadUnderLoad(contender, makeReload(contender))
  } catch (err) {
    console.error(`skipped: ${err.message}`)
    return null
  } finally {
    if (contender) await contender.stop()
  }
}

async function main () {
  installCleanup()
  const rows = []
  rows.push(await runContender(
    () => startLocal('clusterize', { label: 'clusterize (SIGUSR2)' }),
    (c) => signalReloader(c)))
  rows.push(await runContender(
    () => startPm2({ instances: WORKERS, label: 'PM2 `pm2 reload`' }),
    (c) => () => c.reload()))
  rows.push(await runContender(
    () => startLocal('cluster', { label: 'textbook SIGUSR2 rolling restart' }),
    (c) => signalReloader(c)))
  const done = rows.filter(Boolean)

  console.log(`## Reload under load: two rolling reloads in ${SECONDS} s (${WORKERS} workers each)\n`)
  console.log(machineLine())
  console.log(`\n${CONCURRENCY} concurrent keep-alive client loops (node:http Agent), reloads at ~${FIRST_RELOAD_AT_MS / 1000} s and ${GAP_MS / 1000} s after the first completes. ` +
    'failed = connection errors/resets + non-2xx. "reload window" = from the signal/command until the reload reports done. ' +
    'The client runs on the same cores as the servers.\n')
  console.log(markdownTable(
    ['contender', 'requests', 'failed', 'failure kinds', 'p99 steady ms', 'p99 during reload ms', 'reload / steady p99', 'reload durations ms', 'workers replaced'],
    done.map((r) => [r.label, fmt(r.total), r.failed, r.errors, fmt(r.steadyP99, 1), fmt(r.reloadP99, 1), ratio(r.reloadP99, r.steadyP99), r.reloadMs, r.replaced])))
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
