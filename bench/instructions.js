'use strict'

/**
 * A diagnostic, run by hand (not by run-all.js): instructions per request,
 * counted by valgrind's callgrind, for bench/sessions.js's servers with one
 * worker each. Time per request on a 2-core cloud box moves with the core's
 * own speed (bench/README.md, "The same box, rebooted"); a count of the
 * instructions each process runs does not, so it can tell apart two costs
 * that a CPU-time table measures within its noise. It counts user space only:
 * the kernel's side of a system call or a wake-up (most of what an IPC or a
 * Redis round trip costs) is not in it, and neither is redis-server, which
 * runs outside valgrind. So compare rows with the same I/O (MemoryStore on
 * raw node:cluster against MemoryStore in clusterize's worker) to judge a
 * runtime cost, and read the store rows as the Node side of their work.
 *
 * Each server runs under callgrind (--trace-children, so its worker too) with
 * counting off while it starts and warms up (--instr-atstart=no), then on:
 * every repetition zeroes the counters, sends `--requests` requests (4
 * keep-alive connections, each with its own session, GET /count: a read and
 * a write), dumps, and divides each process's total by the requests. Medians
 * of the repetitions. Valgrind runs the servers some 20-50x slower, so the
 * load is a fixed number of requests, not a rate. Shorter repetitions than
 * the defaults do not even out garbage collection and the compiler's tiering
 * (bench/README.md, "Counting instructions instead of time"). Needs valgrind (Debian
 * package valgrind) and, for the recipe row, Redis at REDIS_URL. Loopback only;
 * every process started is stopped by PID.
 *
 *   node bench/instructions.js [--requests 4000] [--reps 5] [--warmup 15000] [--rows raw,clusterize,cluster,plain,recipe]
 */

const fs = require('fs')
const os = require('os')
const path = require('path')
const { execFile, spawnSync } = require('child_process')
const { numberArg } = require('./lib/args')
const { median, ratio, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { startServed, stopServed } = require('./lib/served')
const { prepare, runLoad } = require('./sessions')

const ROWS = {
  raw: { name: 'express-session MemoryStore on raw node:cluster (anchor, no code of ours)', spec: { store: 'raw-memory', runtime: 'raw', workers: 1 } },
  clusterize: { name: 'express-session MemoryStore in clusterize\'s worker', spec: { store: 'raw-memory', workers: 1 } },
  cluster: { name: 'clusterize, cluster store', spec: { store: 'cluster', workers: 1 } },
  plain: { name: 'express-session with our cluster store, no session() around it', spec: { store: 'cluster-plain', workers: 1 } },
  recipe: { name: 'recipe: express-session + connect-redis + ioredis, raw node:cluster (redis-server not counted)', spec: { store: 'recipe', prefix: 'bench-instructions:', workers: 1 } }
}

/**
 * The instruction count in a callgrind output file ("totals:", else "summary:").
 * @param {string} text
 * @returns {number} NaN when the file has neither
 */
function callgrindTotal (text) {
  const match = /^totals:\s+(\d+)/m.exec(text) || /^summary:\s+(\d+)/m.exec(text)
  return match ? Number(match[1]) : NaN
}

function hasValgrind () {
  return !spawnSync('valgrind', ['--version']).error && !spawnSync('callgrind_control', ['-h']).error
}

/** callgrind_control with `args` on `pid` (it waits until the process has done it). */
function control (pid, args) {
  return new Promise((resolve, reject) => {
    execFile('callgrind_control', args.concat(String(pid)), { timeout: 120000 }, (err) => (err ? reject(err) : resolve()))
  })
}

/** bench/sessions.js's server for `spec`, its processes under callgrind, counting off. */
function startCounted (spec, outDir) {
  return startServed(path.join(__dirname, 'sessions.js'), ['--serve', 'instructions', JSON.stringify(spec)], `${spec.store} under valgrind`, { NODE_ENV: 'development' }, {
    execPath: 'valgrind',
    execArgv: ['--tool=callgrind', '--trace-children=yes', '--instr-atstart=no', `--callgrind-out-file=${outDir}/cg.%p`, process.execPath],
    readyMs: 300000
  })
}

/** `amount` requests on 4 keep-alive connections, each with one of `cookies`. */
function send (port, cookies, amount) {
  return runLoad(port, cookies, { connections: 4, amount, timeout: 60 })
}

async function measureRow (row, options) {
  const outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-callgrind-'))
  const server = await startCounted(row.spec, outDir)
  try {
    const cookies = (await prepare(server.port)).slice(0, 4)
    await send(server.port, cookies, options.warmup)
    for (const pid of server.pids) await control(pid, ['-i', 'on'])
    const perRep = server.pids.map(() => [])
    let failed = 0
    for (let rep = 1; rep <= options.reps; rep++) {
      for (const pid of server.pids) await control(pid, ['-z'])
      const result = await send(server.port, cookies, options.requests)
      const n = result.requests.total
      failed += result.errors + result.non2xx + result.timeouts
      for (let i = 0; i < server.pids.length; i++) {
        const pid = server.pids[i]
        await control(pid, ['-d'])
        perRep[i].push(callgrindTotal(fs.readFileSync(path.join(outDir, `cg.${pid}.${rep}`), 'utf8')) / n)
      }
    }
    return { primary: perRep[0], worker: perRep[1], failed }
  } finally {
    await stopServed(server)
    fs.rmSync(outDir, { recursive: true, force: true })
  }
}

async function main () {
  if (!hasValgrind()) throw new Error('bench/instructions.js needs valgrind and callgrind_control (Debian package valgrind)')
  const options = { requests: numberArg('--requests', 4000), reps: numberArg('--reps', 5), warmup: numberArg('--warmup', 15000) }
  const i = process.argv.indexOf('--rows')
  const names = i > 0 ? process.argv[i + 1].split(',') : Object.keys(ROWS)
  for (const name of names) if (!ROWS[name]) throw new Error(`--rows: unknown row ${name} (${Object.keys(ROWS).join(', ')})`)
  const started = Date.now()
  const results = []
  for (const name of names) results.push({ name, row: ROWS[name], measured: await measureRow(ROWS[name], options) })
  const k = (v) => fmt(v / 1000, 0) + 'k'
  const anchor = results.find((r) => r.name === 'raw')
  const anchorTotal = anchor ? median(anchor.measured.primary) + median(anchor.measured.worker) : NaN
  const rows = results.map(({ row, measured }) => {
    const total = median(measured.primary) + median(measured.worker)
    return [row.name, k(median(measured.primary)), k(median(measured.worker)), k(total), ratio(total, anchorTotal),
      measured.worker.map(k).join(' / '), measured.failed]
  })
  console.log(machineLine() + '\n')
  console.log(`### Instructions per request (callgrind, user space; 1 worker, GET /count, ${options.requests} requests x ${options.reps} repetitions after ${options.warmup} to warm up; medians)\n`)
  console.log(markdownTable(['server', 'primary instructions/request', 'worker instructions/request', 'total', 'total vs anchor', 'worker per repetition', 'errors'], rows))
  console.log(`\nCounted by valgrind's callgrind in user space only: system calls and wake-ups (most of an IPC or Redis round trip) and redis-server are not in these counts. Total run time ${Math.round((Date.now() - started) / 1000)} s.`)
}

if (require.main === module) {
  main().catch((err) => {
    process.stderr.write(err.stack + '\n')
    process.exitCode = 1
  })
}

module.exports = { callgrindTotal }
