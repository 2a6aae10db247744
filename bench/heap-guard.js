'use strict'

/**
 * bench/heap-guard.js: does the memory guard recycle a fast-leaking worker
 * before V8 aborts it? For 256, 512 and 1024 MB heaps (--max-old-space-size)
 * and a leak of ~70 MB/s of small objects on the V8 heap:
 *
 * 1. raw V8: one process leaks until V8 aborts it, sampling its heap every
 *    50 ms. Where heapUsed stood at the last sample, as a fraction of
 *    heap_size_limit (what maxHeapRatio compared against before 0.2) and of
 *    the old-generation limit the guard uses now.
 * 2. clusterize, one worker, default health options (heartbeat 1 s,
 *    maxHeapRatio 0.9), the same leak from boot: for each of the first
 *    --recycles workers, did the guard recycle it (exit reason 'memory') or
 *    did V8 abort it first (a crash, SIGABRT), at what heap figure the guard
 *    fired, and how long the worker lived.
 *
 *   node bench/heap-guard.js [--recycles 2] [--rate 70] [--heaps 256,512,1024]
 *
 * Loopback only, about 2 min; stops everything it started by PID.
 */

const v8 = require('v8')
const { numberArg: arg } = require('./lib/args')
const { markdownTable, fmt, median } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { startProcess, stopProcess, installCleanup, sleep } = require('./lib/proc')
const { startLeak } = require('./lib/leak')

const MB = 1024 * 1024
const RATE = arg('--rate', 70)
const RECYCLES = arg('--recycles', 2)
const HEAPS = (process.argv.find((a, i) => process.argv[i - 1] === '--heaps') || '256,512,1024').split(',').map(Number)

/** Mode 'leak': leak and print the heap every 50 ms until V8 aborts. */
function runRawLeak () {
  const fs = require('fs')
  const started = Date.now()
  const limit = v8.getHeapStatistics().heap_size_limit
  startLeak(RATE)
  setInterval(function sample () {
    fs.writeSync(1, `SAMPLE ${JSON.stringify({ t: Date.now() - started, used: process.memoryUsage().heapUsed, limit })}\n`)
  }, 50)
}

/** Mode 'primary': a one-worker clusterize primary whose app leaks from boot; lifecycle lines on stdout. */
function runPrimary () {
  const { clusterize } = require('..')
  const print = (kind, data) => console.log(`${kind} ${JSON.stringify(Object.assign({ at: Date.now() }, data))}`)
  // pino's calling convention: (fields, message).
  const logger = { info () {}, debug () {}, warn: (fields, message) => print('WARN', { message }), error: (fields, message) => print('ERROR', { message }) }
  const handle = clusterize(function createLeakingApp () {
    startLeak(RATE)
    return (req, res) => res.end('ok')
  }, { workers: 1, port: 0, host: '127.0.0.1', logger, banner: false })
  if (!handle.on) return
  handle.on('worker:ready', (worker) => print('WREADY', worker))
  handle.on('worker:exit', (event) => print('WEXIT', event))
}

function parse (line, kind) {
  return line.startsWith(kind + ' ') ? JSON.parse(line.slice(kind.length + 1)) : null
}

async function measureRaw (heapMB) {
  const proc = startProcess({ args: [`--max-old-space-size=${heapMB}`, __filename, 'leak', '--rate', String(RATE)], name: `raw ${heapMB}` })
  const { code, signal } = await proc.exited
  const samples = proc.lines.map((l) => parse(l, 'SAMPLE')).filter(Boolean)
  const last = samples[samples.length - 1]
  const oldLimit = heapMB * MB
  return { heapMB, code, signal, abortMs: last.t, ofLimit: last.used / last.limit, ofOld: last.used / oldLimit, limitMB: last.limit / MB, rate: last.used / MB / (last.t / 1000) }
}

async function measureGuard (heapMB, rawAbortMs) {
  const proc = startProcess({ args: [`--max-old-space-size=${heapMB}`, __filename, 'primary', '--rate', String(RATE)], name: `clusterize ${heapMB}` })
  const deadline = Date.now() + (RECYCLES + 1) * rawAbortMs * 2 + 30000
  try {
    while (Date.now() < deadline && proc.lines.filter((l) => l.startsWith('WEXIT ')).length < RECYCLES) await sleep(100)
  } finally {
    await stopProcess(proc)
  }
  const ready = new Map()
  let lastWarn = null
  const workers = []
  for (const line of proc.lines) {
    const r = parse(line, 'WREADY')
    if (r) ready.set(r.pid, r.at)
    const w = parse(line, 'WARN')
    if (w && /heap|RSS/.test(w.message)) lastWarn = w.message
    const e = parse(line, 'WEXIT')
    if (e && workers.length < RECYCLES) {
      workers.push({ reason: e.reason, signal: e.signal, livedMs: ready.has(e.pid) ? e.at - ready.get(e.pid) : null, guard: e.reason === 'memory' ? lastWarn : null })
      lastWarn = null
    }
  }
  return { heapMB, workers }
}

async function main () {
  installCleanup()
  const rows = []
  for (const heapMB of HEAPS) {
    const raw = await measureRaw(heapMB)
    const guard = await measureGuard(heapMB, raw.abortMs)
    rows.push({ raw, guard })
    console.error(`${heapMB} MB done: ${JSON.stringify({ raw, guard })}`)
  }
  console.log(`## The memory guard against a ${RATE} MB/s leak (--max-old-space-size 256/512/1024)\n`)
  console.log(machineLine())
  console.log(`\nRaw V8: one process leaks ~${RATE} MB/s of small objects until V8 aborts it; heapUsed is read every 50 ms, the last reading before the abort is shown. ` +
    `clusterize: one worker whose app leaks the same from boot, default health options (heartbeat 1 s, maxHeapRatio 0.9); the first ${RECYCLES} workers. ` +
    '"guard fired at" is the guard\'s own message. "lived" is from the worker\'s ready report to its exit.\n')
  console.log(markdownTable(
    ['heap', 'raw: aborted after s', 'raw: leak MB/s', 'raw: heapUsed / heap_size_limit at abort', 'raw: heapUsed / old-generation limit at abort', 'clusterize: recycled by the guard', 'clusterize: aborted by V8', 'guard fired at', 'lived s (median)'],
    rows.map(({ raw, guard }) => {
      const recycled = guard.workers.filter((w) => w.reason === 'memory').length
      const crashed = guard.workers.filter((w) => w.reason === 'crash').length
      const lived = guard.workers.map((w) => w.livedMs).filter((v) => v !== null)
      return [`${raw.heapMB} MB (limit ${fmt(raw.limitMB)} MB)`, fmt(raw.abortMs / 1000, 1), fmt(raw.rate), fmt(raw.ofLimit, 3), fmt(raw.ofOld, 3),
        `${recycled}/${guard.workers.length}`, `${crashed}/${guard.workers.length}`,
        guard.workers.map((w) => w.guard ? w.guard.replace(/^worker \d+ /, '').replace(/: recycling it$/, '') : w.reason + (w.signal ? ` ${w.signal}` : '')).join('; '),
        lived.length ? fmt(median(lived) / 1000, 1) : '-']
    })))
}

if (process.argv[2] === 'leak') runRawLeak()
else if (process.argv[2] === 'primary') runPrimary()
else {
  main().catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
}

