'use strict'

/**
 * bench/dynamic-workers.js: a load step from idle to saturation and back,
 * against dynamic workers (`workers: { min: 1, max: 'auto' }`) and fixed
 * counts (1, and every usable CPU). Each request to /work burns ~4 ms of CPU,
 * so one worker saturates long before the machine does. The timeline: idle,
 * then wrk (keep-alive, 16 connections) in one-second slices, then idle
 * again; per second, the workers the primary runs and the slice's p99. The
 * summary adds req/s under load, failed requests and worker-seconds (what
 * the run cost in processes).
 *
 *   node bench/dynamic-workers.js [--quick] [--idle 3] [--load 15] [--after 12]
 *
 * Dynamic workers run with short windows here (upAfterMs 2000, downAfterMs
 * 5000) so the step fits a short run; the defaults (10 s, 60 s) move the
 * same way, slower. Loopback only; stops everything it started by PID.
 */

const { numberArg: arg } = require('./lib/args')
const { markdownTable, fmt, median } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { startProcess, stopProcess, waitForLine, installCleanup, sleep } = require('./lib/proc')
const { hasWrk, wrkRun } = require('./lib/wrk')
const { cpuSample, otherWorkLine } = require('./lib/other-load')
const { otherWorkLabel } = require('./lib/results')
const { availableCpus } = require('../lib/cpus')

const IDLE_S = arg('--idle', 3, 2)
const LOAD_S = arg('--load', 15, 8)
const AFTER_S = arg('--after', 12, 8)
const CONNECTIONS = 16
const WORK_MS = 4

/** Mode 'primary': a clusterize primary; prints PORT once ready and WORKERS every 250 ms. */
function runPrimary (mode) {
  const { clusterize } = require('..')
  const workers = mode === 'dynamic' ? { min: 1, max: 'auto', upAfterMs: 2000, downAfterMs: 5000 } : Number(mode)
  const logger = { info (fields, message) { if (/dynamic workers|scal/.test(String(message || fields))) console.log(`LOG ${Date.now()} ${message || fields}`) }, warn () {}, error (fields, message) { console.log(`ERROR ${message || fields}`) } }
  const handle = clusterize(function createApp () {
    return function serve (req, res) {
      if (req.url === '/work') {
        const until = process.hrtime.bigint() + BigInt(WORK_MS * 1e6)
        while (process.hrtime.bigint() < until) {}
      }
      res.end('ok')
    }
  }, { workers, port: 0, host: '127.0.0.1', logger, banner: false })
  if (!require('cluster').isPrimary) return
  handle.ready.then((info) => {
    console.log(`PORT ${info.port}`)
    setInterval(() => console.log(`WORKERS ${Date.now()} ${handle.stats().scaling.workers}`), 250)
  })
}

/** The worker count the primary last printed at or before `at`. */
function workersAt (proc, at) {
  let count = null
  for (const line of proc.lines) {
    const match = /^WORKERS (\d+) (\d+)$/.exec(line)
    if (!match) continue
    if (Number(match[1]) > at) break
    count = Number(match[2])
  }
  return count
}

async function measure (mode) {
  const proc = startProcess({ args: [__filename, 'primary', mode], name: `primary ${mode}` })
  try {
    const port = Number((await waitForLine(proc, /^PORT \d+$/, 60000)).split(' ')[1])
    const slices = []
    const record = (phase, result) => slices.push({ phase, at: Date.now(), p99: result ? result.p99 : null, rps: result ? result.rps : null, failed: result ? result.failed : 0 })
    for (let s = 0; s < IDLE_S; s++) { await sleep(1000); record('idle') }
    for (let s = 0; s < LOAD_S; s++) record('load', await wrkRun({ port, connections: CONNECTIONS, seconds: 1, path: '/work' }))
    for (let s = 0; s < AFTER_S; s++) { await sleep(1000); record('idle') }
    for (const slice of slices) slice.workers = workersAt(proc, slice.at)
    return { mode, slices }
  } finally {
    await stopProcess(proc)
  }
}

async function main () {
  if (!hasWrk()) {
    console.error('bench/dynamic-workers.js needs wrk (Debian package `wrk`)')
    process.exit(1)
  }
  installCleanup()
  const cpus = availableCpus()
  const modes = ['1', String(cpus), 'dynamic']
  const label = (mode) => mode === 'dynamic' ? 'dynamic (1..' + cpus + ')' : `fixed ${mode}`
  const before = cpuSample()
  const runs = []
  for (const mode of modes) runs.push(await measure(mode))
  const after = cpuSample()

  console.log(`## Dynamic workers: a load step, ${IDLE_S} s idle, ${LOAD_S} s of wrk -c${CONNECTIONS} on a ${WORK_MS} ms CPU route, ${AFTER_S} s idle\n`)
  console.log('### Timeline (per second: workers / p99 ms of that second\'s wrk slice)\n')
  const rows = runs[0].slices.map((slice, i) => [String(i + 1), slice.phase].concat(runs.map((run) => {
    const s = run.slices[i]
    return `${s.workers === null ? '-' : s.workers} / ${s.p99 === null ? '-' : fmt(s.p99, 1)}`
  })))
  console.log(markdownTable(['s', 'phase'].concat(runs.map((run) => label(run.mode))), rows))
  console.log('\n### Summary\n')
  const summary = runs.map((run) => {
    const load = run.slices.filter((s) => s.phase === 'load')
    const workerSeconds = run.slices.reduce((sum, s) => sum + (s.workers || 0), 0)
    return [label(run.mode), fmt(median(load.map((s) => s.rps)), 0), fmt(median(load.map((s) => s.p99)), 1), fmt(Math.max(...load.map((s) => s.p99)), 1),
      String(load.reduce((sum, s) => sum + s.failed, 0)), String(Math.max(...run.slices.map((s) => s.workers || 0))), String(workerSeconds)]
  })
  console.log(markdownTable(['workers', 'req/s under load (median slice)', 'p99 ms (median slice)', 'p99 ms (worst slice)', 'failed', 'most workers', 'worker-seconds'], summary))
  const other = otherWorkLine(before, after, require('os').availableParallelism(), otherWorkLabel)
  console.log('\n' + machineLine(other || undefined))
}

if (process.argv[2] === 'primary') runPrimary(process.argv[3])
else main().catch((err) => { console.error(err); process.exit(1) })
