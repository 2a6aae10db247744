'use strict'

/**
 * Watt (npm `wattpm`, Platformatic's application server) as an anchor: the
 * same Express app (bench/lib/apps.js) run unchanged by `@platformatic/node`
 * in N worker threads that each bind the port with SO_REUSEPORT.
 *
 * Its packages (~150 MB) are installed on demand into bench/.tmp/watt
 * (gitignored) the first time a bench needs them, never into the project's
 * node_modules, so `npm ci` does not pay for them. Versions are pinned so two
 * runs compare the same Watt; BENCH_WATT_VERSION overrides wattpm's.
 */

const fs = require('fs')
const path = require('path')
const { execFileSync } = require('child_process')
const { startProcess, waitForHttp, stopProcess, treeMemory, freePort } = require('./proc')

const DIR = path.join(__dirname, '..', '.tmp', 'watt')
const WATTPM = process.env.BENCH_WATT_VERSION || '3.67.0'
/** The newest @platformatic/node published when wattpm 3.67.0 was (its capability for a plain Node/Express app). */
const NODE_CAPABILITY = process.env.BENCH_WATT_NODE_VERSION || '3.65.0'
const APPS = path.join(__dirname, 'apps.js')

function installedVersion (name) {
  try {
    return JSON.parse(fs.readFileSync(path.join(DIR, 'node_modules', name, 'package.json'), 'utf8')).version
  } catch {
    return null
  }
}

/**
 * Install wattpm and @platformatic/node into bench/.tmp/watt unless the
 * pinned versions are there already. Throws (with npm's output) if npm fails.
 * @returns {{ version: string, bin: string }}
 */
function ensureWatt () {
  if (installedVersion('wattpm') !== WATTPM || installedVersion('@platformatic/node') !== NODE_CAPABILITY) {
    fs.mkdirSync(DIR, { recursive: true })
    const manifest = path.join(DIR, 'package.json')
    if (!fs.existsSync(manifest)) fs.writeFileSync(manifest, JSON.stringify({ name: 'cz-bench-watt', private: true }) + '\n')
    process.stderr.write(`installing wattpm@${WATTPM} and @platformatic/node@${NODE_CAPABILITY} into ${DIR} (once; ~150 MB)\n`)
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel', 'error', `wattpm@${WATTPM}`, `@platformatic/node@${NODE_CAPABILITY}`],
      { cwd: DIR, stdio: ['ignore', 'ignore', 'pipe'], timeout: 10 * 60 * 1000 })
  }
  return { version: installedVersion('wattpm'), bin: path.join(DIR, 'node_modules', 'wattpm', 'bin', 'cli.js') }
}

/**
 * A Watt project for one contender: watt.json and an entry that exports
 * `create()` returning the bench's Express app (Watt calls it, then listens).
 * GET /who answers the worker thread's id (the balance count; every thread has Watt's one pid).
 */
function writeProject (dir, { port, workers, app }) {
  fs.mkdirSync(dir, { recursive: true })
  fs.writeFileSync(path.join(dir, 'watt.json'), JSON.stringify({
    $schema: `https://schemas.platformatic.dev/@platformatic/node/${NODE_CAPABILITY}.json`,
    module: '@platformatic/node',
    node: { main: './entry.js' },
    runtime: {
      workers,
      logger: { level: 'warn' },
      server: { hostname: '127.0.0.1', port }
    }
  }, null, 2) + '\n')
  fs.writeFileSync(path.join(dir, 'entry.js'), [
    "'use strict'",
    "const { threadId } = require('worker_threads')",
    `const { createApp } = require(${JSON.stringify(APPS)})`,
    'module.exports.create = function create () {',
    `  const app = createApp(${JSON.stringify(app || 'hello')})`,
    "  app.get('/who', (req, res) => res.json({ pid: process.pid, thread: threadId }))",
    '  return app',
    '}',
    ''
  ].join('\n'))
  // @platformatic/node is resolved from the project's directory.
  const link = path.join(dir, 'node_modules')
  if (!fs.existsSync(link)) fs.symlinkSync(path.join(DIR, 'node_modules'), link, 'dir')
}

/**
 * Start `wattpm start` with `workers` threads on a free loopback port.
 * @param {{ workers: number, node?: string, label?: string, app?: string }} spec
 */
async function startWatt (spec) {
  const { version, bin } = ensureWatt()
  const port = await freePort()
  const dir = path.join(DIR, 'projects', String(port))
  writeProject(dir, { port, workers: spec.workers, app: spec.app })
  const proc = startProcess({ node: spec.node, args: [bin, 'start', dir], name: spec.label || 'watt' })
  const stop = async () => {
    await stopProcess(proc, 15000)
    fs.rmSync(dir, { recursive: true, force: true })
  }
  try {
    await waitForHttp(port, 60000)
  } catch (err) {
    await stop()
    throw new Error(`${err.message}; Watt's stderr: ${proc.stderr}`)
  }
  return {
    label: spec.label || `Watt ${version}`,
    version,
    port,
    proc,
    workers: spec.workers,
    /** Watt's workers are threads of one process: GET /who names the thread. */
    whoPath: '/who',
    whoKey: 'thread',
    tree () {
      return treeMemory(proc.pid)
    },
    /** Workers Watt replaced as unhealthy so far (its health check: ELU, heap, event-loop delay), from its log. */
    replacedWorkers () {
      return proc.lines.concat(proc.stderr.split('\n')).filter((line) => /is unhealthy[^]*Replacing it/.test(line)).length
    },
    allPids () {
      return [proc.pid]
    },
    stop
  }
}

module.exports = { ensureWatt, startWatt, WATT_DIR: DIR }
