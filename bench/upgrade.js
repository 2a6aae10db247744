'use strict'

/**
 * bench/upgrade.js: replacing the primary itself (a new Node, a new process
 * manager) under load, side by side, one at a time on the same 2 cores:
 *
 * - clusterize upgrade: SIGURG to the primary (what `clusterize upgrade` asks
 *   for); the window ends when the old primary has drained and exited;
 * - the textbook stop-and-start of clusterize: SIGTERM, wait, start again
 *   (what the README advised before #26);
 * - a raw node:cluster primary killed and started again;
 * - PM2: `pm2 update` (a new daemon) then `pm2 reload`.
 *
 * Load: half the clients on keep-alive connections, half on a new connection
 * per request. Counts failed requests (connection errors/resets, non-2xx)
 * and compares p99 inside the window with steady state. For reference, one
 * rolling `clusterize reload` under the same load (not with --quick).
 *
 *   node bench/upgrade.js [--seconds 14] [--concurrency 20]
 *
 * Loopback only, about 2 minutes, stops everything it started by PID, PM2 by `pm2 kill`.
 */

const { numberArg: arg, isQuick } = require('./lib/args')
const { startLocal, startPm2 } = require('./lib/contenders')
const { runClientLoop, percentile, requestTimeoutArg } = require('./lib/load')
const { fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, waitForLine, sleep, isAlive } = require('./lib/proc')

const SECONDS = arg('--seconds', 14, 4.5)
const CONCURRENCY = arg('--concurrency', 20)
const AT_MS = isQuick() ? 1500 : 4000
const REQUEST_TIMEOUT_MS = requestTimeoutArg()

/** Load both ways while `operate()` runs once, AT_MS in. */
async function underLoad (port, operate) {
  const half = Math.max(1, Math.floor(CONCURRENCY / 2))
  const loads = [
    runClientLoop({ port: port(), concurrency: half, durationMs: SECONDS * 1000, timeoutMs: REQUEST_TIMEOUT_MS }),
    runClientLoop({ port: port(), concurrency: half, durationMs: SECONDS * 1000, keepAlive: false, timeoutMs: REQUEST_TIMEOUT_MS })
  ]
  await sleep(AT_MS)
  const start = Date.now()
  const detail = await operate()
  const end = Date.now()
  const results = await Promise.all(loads)
  return summarize(results, { start, end }, detail)
}

function summarize (results, window, detail) {
  const during = []
  const steady = []
  const errors = {}
  let failed = 0
  let total = 0
  for (const result of results) {
    total += result.samples.length
    for (const s of result.samples) {
      if (!s.ok) failed++
      else if (s.start >= window.start && s.start <= window.end) during.push(s.ms)
      else steady.push(s.ms)
    }
    for (const [why, n] of Object.entries(result.errors)) errors[why] = (errors[why] || 0) + n
  }
  return {
    total,
    failed,
    errors: Object.entries(errors).map(([k, v]) => `${k} ${v}`).join(', ') || '-',
    steadyP99: percentile(steady, 99),
    windowP99: percentile(during, 99),
    windowMs: window.end - window.start,
    detail
  }
}

async function clusterizeUpgrade () {
  const contender = await startLocal('clusterize', { label: 'clusterize upgrade (SIGURG)', options: { workers: 2 } })
  try {
    return await underLoad(() => contender.port, async () => {
      const oldPid = contender.proc.pid
      contender.signal('SIGURG')
      const line = await waitForLine(contender.proc, /^UPGRADE_DONE /, 60000)
      const result = JSON.parse(line.slice('UPGRADE_DONE '.length))
      if (!result.ok) throw new Error('upgrade failed: ' + result.reason)
      // The window ends when the old primary has drained and exited.
      while (isAlive(oldPid)) await sleep(20)
      return `new primary ${result.pid}, took over in ${result.durationMs} ms`
    })
  } finally {
    await contender.stop()
  }
}

async function clusterizeReload () {
  const contender = await startLocal('clusterize', { label: 'clusterize reload (reference)', options: { workers: 2, reload: { bakeMs: 0 } } })
  try {
    return await underLoad(() => contender.port, async () => {
      contender.signal('SIGUSR2')
      await waitForLine(contender.proc, /^RELOAD_DONE /, 60000)
      return 'workers replaced, primary kept'
    })
  } finally {
    await contender.stop()
  }
}

/** Stop the primary (SIGTERM), wait for it, start a new one on the same port. */
async function stopAndStart (kind, label, options) {
  let contender = await startLocal(kind, { label, options })
  const port = contender.port
  try {
    return await underLoad(() => port, async () => {
      await contender.stop()
      contender = await startLocal(kind, { label, options, port })
      return 'down between the exit and the new READY'
    })
  } finally {
    await contender.stop()
  }
}

async function pm2UpdateReload () {
  const contender = await startPm2({ instances: 2 })
  try {
    return await underLoad(() => contender.port, async () => {
      await contender.pm2.run(['update'])
      await contender.reload()
      return 'pm2 update, then pm2 reload'
    })
  } finally {
    await contender.stop()
  }
}

async function main () {
  installCleanup()
  const rows = []
  const contenders = [
    ['clusterize upgrade (SIGURG)', clusterizeUpgrade],
    ['clusterize stop, then start', () => stopAndStart('clusterize', 'clusterize stop, then start', { workers: 2 })],
    ['raw node:cluster: kill, then start', () => stopAndStart('cluster', 'raw node:cluster: kill, then start')],
    ['pm2 update + pm2 reload', pm2UpdateReload],
    // The reference row is bench/reload.js's subject: --quick leaves it to that script.
    ...(isQuick() ? [] : [['clusterize reload (workers only, reference)', clusterizeReload]])
  ]
  for (const [label, run] of contenders) {
    process.stderr.write(`${label}...\n`)
    try {
      const r = await run()
      rows.push([label, r.total, r.failed, r.errors, fmt(r.steadyP99, 0), fmt(r.windowP99, 0), r.windowMs, r.detail])
    } catch (err) {
      rows.push([label, '-', '-', 'error: ' + err.message.split('\n')[0], '-', '-', '-', '-'])
    }
  }
  const out = [
    '## Replacing the primary under load',
    '',
    machineLine(),
    '',
    `${CONCURRENCY} clients for ${SECONDS} s (half keep-alive, half a new connection per request), the operation ${AT_MS / 1000} s in; ` +
      'p99 of the successful requests that started inside the operation\'s window against the rest. ' +
      `A request unanswered after ${REQUEST_TIMEOUT_MS / 1000} s fails (ETIMEDOUT). 2 workers each.`,
    '',
    markdownTable(['contender', 'requests', 'failed', 'errors', 'steady p99 ms', 'p99 in window ms', 'window ms', 'what happened'], rows)
  ]
  process.stdout.write(out.join('\n') + '\n')
}

main().then(() => process.exit(0), (err) => {
  process.stderr.write(err.stack + '\n')
  process.exit(1)
})
