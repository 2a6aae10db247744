'use strict'

/**
 * bench/run-all.js (`npm run bench`): runs every benchmark in turn and
 * writes bench/RESULTS.md with the latest run of each (a run of some
 * scripts replaces their sections and keeps the others), plus
 * bench/charts/*.svg (throughput and p99 bars per table).
 *
 *   node bench/run-all.js [--quick] [name ...]   e.g. `npm run bench -- --quick sessions reload`
 *
 * --quick is passed to every script (fewer rounds, shorter runs; the whole
 * set in under 5 minutes). Each script runs in its own process group with a
 * time limit; if it overruns, the group is killed by its PID.
 */

const { spawn } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const debug = require('debug')('clusterize:bench')
const { machineLine } = require('./lib/machine')
const { parseTables, tableToSvg } = require('./lib/charts')
const { AREAS } = require('./lib/areas')
const { renderSection, mergeResults } = require('./lib/results')

const BENCH_DIR = __dirname
const CHART_DIR = path.join(BENCH_DIR, 'charts')
const RESULTS = path.join(BENCH_DIR, 'RESULTS.md')
/** Diagnostics, run by hand (they explain a figure, they are not one). */
const DIAGNOSTICS = ['bus-trace']

/**
 * The scripts to run: every bench/*.js but this one and the diagnostics, in
 * AREAS order, or only those named.
 * @param {string[]} files the bench directory's entries
 * @param {string[]} only names ('sessions' or 'sessions.js'); empty for all
 * @returns {string[]} script names without '.js'
 */
function listScripts (files, only) {
  const order = AREAS.map((a) => a.script)
  const rank = (name) => (order.includes(name) ? order.indexOf(name) : order.length)
  const all = files
    .filter((f) => f.endsWith('.js') && f !== 'run-all.js' && !f.startsWith('.'))
    .map((f) => f.replace(/\.js$/, ''))
    .filter((name) => !DIAGNOSTICS.includes(name))
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
  if (only.length === 0) return all
  const wanted = only.map((n) => n.replace(/\.js$/, ''))
  return all.filter((name) => wanted.includes(name))
}

/** Run one script; resolve with its stdout, exit status and duration. */
function runScript (name, args, limitMs) {
  return new Promise((resolve) => {
    const started = Date.now()
    const child = spawn(process.execPath, [path.join(BENCH_DIR, name + '.js')].concat(args), {
      cwd: path.join(BENCH_DIR, '..'),
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
  const scripts = listScripts(fs.readdirSync(BENCH_DIR), only)
  const limitMs = Number(process.env.BENCH_SCRIPT_TIMEOUT_MS) || (quick ? 150 : 6 * 60) * 1000
  const args = quick ? ['--quick'] : []
  fs.mkdirSync(CHART_DIR, { recursive: true })
  const fresh = new Map()
  const started = Date.now()
  for (const name of scripts) {
    process.stderr.write(`\n=== bench/${name}.js${quick ? ' --quick' : ''} ===\n`)
    const loadBefore = os.loadavg()
    const run = await runScript(name, args, limitMs)
    debug('%s: %s in %d s', name, run.status, run.seconds)
    fresh.set(name, renderSection(run, {
      machine: machineLine(),
      command: ['node', `bench/${name}.js`].concat(args).join(' '),
      runner: ['node', 'bench/run-all.js'].concat(argv).join(' '),
      quick,
      loadBefore,
      loadAfter: os.loadavg(),
      cores: os.availableParallelism(),
      charts: writeCharts(run)
    }))
    // Written after every script, so an interrupted run still leaves what it measured.
    const previous = fs.existsSync(RESULTS) ? fs.readFileSync(RESULTS, 'utf8') : ''
    fs.writeFileSync(RESULTS, mergeResults(previous, fresh, { date: new Date().toISOString() }))
  }
  process.stderr.write(`\nwrote bench/RESULTS.md and bench/charts/ (${scripts.length} scripts, ${Math.round((Date.now() - started) / 1000)} s)\n`)
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err)
    process.exitCode = 1
  })
}

module.exports = { listScripts }
