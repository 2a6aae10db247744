'use strict'

/**
 * bench/run-all.js (`npm run bench`): runs every benchmark in turn and
 * writes bench/RESULTS.md with the latest run of each (a run of some
 * scripts replaces their sections and keeps the others), plus
 * bench/charts/*.svg (throughput and p99 bars per table).
 *
 *   node bench/run-all.js [--quick] [name ...]   e.g. `npm run bench -- --quick sessions reload`
 *
 * --quick is passed to every script (fewer rounds, shorter runs; the aim is
 * the whole set in under 5 minutes, see bench/README.md for what it takes).
 * Each script runs in its own process group with a time limit; if it
 * overruns, the group is killed by its PID. Any script that fails or
 * overruns makes the run exit 1.
 */

const { spawn } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const debug = require('debug')('clusterize:bench')
const { machineLine } = require('./lib/machine')
const { parseTables, tableToSvg } = require('./lib/charts')
const { AREAS } = require('./lib/areas')
const { cpuSample, otherCores } = require('./lib/other-load')
const { renderSection, mergeResults, runSummaryLine } = require('./lib/results')

// BENCH_RUN_ALL_DIR: another directory of scripts (test/bench-harness.test.js runs tiny ones there).
const BENCH_DIR = process.env.BENCH_RUN_ALL_DIR || __dirname
const CHART_DIR = path.join(BENCH_DIR, 'charts')
const RESULTS = path.join(BENCH_DIR, 'RESULTS.md')
/** Run by hand: diagnostics (they explain a figure, they are not one; instructions.js needs valgrind), regression.js (one bench against a base commit) and chaos.js (the history checker, long: `npm run chaos`). */
const DIAGNOSTICS = ['bus-trace', 'instructions', 'regression', 'chaos']
/**
 * Left out of --quick (their sections in RESULTS.md stay from the last run
 * that wrote them): heap-guard fills 256-1024 MB heaps at the leak's own pace,
 * which is what it measures, so it has no shorter form (~90 s of the 5-minute
 * budget); express-prototypes measures what the worker's server saves Express
 * on this Node, which only that module or a new Node line moves (11 s, with
 * the quick run already at the edge of its budget); many-cores (the many-core
 * model's inputs, ~75 s) and worker-memory (what a worker's memory is made of,
 * ~1 min) move only with the code they measure, and side-by-side.js already
 * has every mode's rates in the quick run.
 */
const FULL_ONLY = ['heap-guard', 'express-prototypes', 'many-cores', 'worker-memory']

/**
 * The scripts to run: every bench/*.js but this one and the diagnostics, in
 * AREAS order, or only those named.
 * @param {string[]} files the bench directory's entries
 * @param {string[]} only names ('sessions' or 'sessions.js'); empty for all
 *   (with `quick`, all but FULL_ONLY; a FULL_ONLY script named in `only` runs)
 * @param {boolean} [quick]
 * @returns {string[]} script names without '.js'
 */
function listScripts (files, only, quick) {
  const order = AREAS.map((a) => a.script)
  const rank = (name) => (order.includes(name) ? order.indexOf(name) : order.length)
  const all = files
    .filter((f) => f.endsWith('.js') && f !== 'run-all.js' && !f.startsWith('.'))
    .map((f) => f.replace(/\.js$/, ''))
    .filter((name) => !DIAGNOSTICS.includes(name))
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
  if (only.length === 0) return quick ? all.filter((name) => !FULL_ONLY.includes(name)) : all
  const wanted = only.map((n) => n.replace(/\.js$/, ''))
  return all.filter((name) => wanted.includes(name))
}

/** Run one script; resolve with its stdout, exit status and duration. */
function runScript (name, args, limitMs) {
  return new Promise((resolve) => {
    const started = Date.now()
    const child = spawn(process.execPath, [path.join(BENCH_DIR, name + '.js')].concat(args), {
      cwd: path.join(__dirname, '..'),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true
    })
    let stdout = ''
    let timedOut = false
    child.stdout.on('data', (chunk) => {
      stdout += chunk
      process.stdout.write(chunk)
    })
    child.stderr.on('data', (chunk) => process.stderr.write(chunk))
    const timer = setTimeout(() => {
      timedOut = true
      killGroup(child.pid, 'SIGTERM')
      setTimeout(() => killGroup(child.pid, 'SIGKILL'), 5000).unref()
    }, limitMs)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      killGroup(child.pid, 'SIGKILL') // anything it left behind in its group
      const status = timedOut
        ? `timed out after ${Math.round(limitMs / 1000)} s (the tables above are what it printed before)`
        : (code === 0 ? 'ok' : `exit code ${code}${signal ? ' (' + signal + ')' : ''}`)
      resolve({ name, stdout, status, seconds: Math.round((Date.now() - started) / 1000) })
    })
  })
}

function killGroup (pid, signal) {
  try { process.kill(-pid, signal) } catch {}
}

function writeCharts (run) {
  for (const old of fs.readdirSync(CHART_DIR)) {
    if (old.startsWith(run.name + '-') && /^\d+\.svg$/.test(old.slice(run.name.length + 1))) fs.unlinkSync(path.join(CHART_DIR, old))
  }
  const links = []
  parseTables(run.stdout).forEach((table, i) => {
    const title = `${run.name}.js: ${table.headers[0]}`
    const svg = tableToSvg(table, title)
    if (!svg) return
    const file = `${run.name}-${i + 1}.svg`
    fs.writeFileSync(path.join(CHART_DIR, file), svg)
    links.push(`![${title}](charts/${file})`)
  })
  return links
}

async function main () {
  const argv = process.argv.slice(2)
  const quick = argv.includes('--quick')
  const only = argv.filter((a) => !a.startsWith('--'))
  const scripts = listScripts(fs.readdirSync(BENCH_DIR), only, quick)
  const limitMs = Number(process.env.BENCH_SCRIPT_TIMEOUT_MS) || (quick ? 150 : 6 * 60) * 1000
  const args = quick ? ['--quick'] : []
  fs.mkdirSync(CHART_DIR, { recursive: true })
  const fresh = new Map()
  const started = Date.now()
  const runs = []
  const command = ['node', 'bench/run-all.js'].concat(argv).join(' ')
  for (const name of scripts) {
    process.stderr.write(`\n=== bench/${name}.js${quick ? ' --quick' : ''} ===\n`)
    const loadBefore = os.loadavg()
    const cpuBefore = cpuSample()
    const run = await runScript(name, args, limitMs)
    const cpuAfter = cpuSample()
    debug('%s: %s in %d s', name, run.status, run.seconds)
    runs.push(run)
    process.stderr.write(`--- bench/${name}.js: ${run.status}, ${run.seconds} s (${Math.round((Date.now() - started) / 1000)} s so far)\n`)
    fresh.set(name, renderSection(run, {
      machine: machineLine(),
      command: ['node', `bench/${name}.js`].concat(args).join(' '),
      runner: command,
      quick,
      loadBefore,
      loadAfter: os.loadavg(),
      otherCores: otherCores(cpuBefore, cpuAfter),
      cores: os.availableParallelism(),
      charts: writeCharts(run)
    }))
    // Written after every script, so an interrupted run still leaves what it measured.
    const previous = fs.existsSync(RESULTS) ? fs.readFileSync(RESULTS, 'utf8') : ''
    const summary = { command, runs, seconds: Math.round((Date.now() - started) / 1000), finished: runs.length === scripts.length }
    fs.writeFileSync(RESULTS, mergeResults(previous, fresh, { date: new Date().toISOString(), run: summary }))
  }
  const seconds = Math.round((Date.now() - started) / 1000)
  const failed = runs.filter((run) => run.status !== 'ok')
  process.stderr.write(`\n${runSummaryLine({ command, runs, seconds, finished: true })}\n`)
  process.stderr.write(`wrote bench/RESULTS.md and bench/charts/\n`)
  // A script that failed or overran fails the whole run: its section (and RESULTS.md's header) says so too.
  if (failed.length > 0) process.exitCode = 1
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
}

module.exports = { listScripts, FULL_ONLY }
