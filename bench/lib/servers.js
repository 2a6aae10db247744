'use strict'

/**
 * The server processes the benches start, one file so they all build the
 * same app:
 *
 *   node bench/lib/servers.js single     <port> [app]
 *   node bench/lib/servers.js cluster    <port> [app]   textbook node:cluster, SIGUSR2 rolling restart
 *   node bench/lib/servers.js clusterize <port> [app] [json options]
 *   node bench/lib/servers.js pm2-app                   (run by PM2: listens on $PORT)
 *
 * BENCH_CLUSTERIZE_MODULE=<dir> runs clusterize from another copy (A/B of a fix).
 * BENCH_WORKERS=<n>: the textbook cluster's worker count (default: one per core).
 * BENCH_CRASH_FILE=<file>: while that file exists, every app built crashes the
 * number of milliseconds it holds after boot (a broken deploy, bench/reload.js);
 * BENCH_HANG_FILE: it blocks its event loop for good that long after boot;
 * BENCH_LEAK_FILE: it leaks the file's MB/s on the V8 heap from boot.
 * Each prints "READY <port>" once it listens (for clusterize: once every
 * worker is ready) and "RELOAD_DONE <json>" after a reload.
 */

const cluster = require('cluster')
const os = require('os')
const { once } = require('events')
const { createApp } = require('./apps')

const fs = require('fs')

const [kind, portArg, appName = 'hello', optionsJson] = process.argv.slice(2)
const port = Number(portArg || process.env.PORT)

/** The number a fault file holds, or null while it does not exist. */
function faultFile (name) {
  const file = process.env[name]
  return file && fs.existsSync(file) ? Number(fs.readFileSync(file, 'utf8')) : null
}

/** Build the bench app; with a BENCH_*_FILE present, as broken code that crashes, hangs or leaks after boot. */
function buildApp () {
  const crashAfterMs = faultFile('BENCH_CRASH_FILE')
  if (crashAfterMs !== null) {
    setTimeout(() => { throw new Error(`broken deploy: crash ${crashAfterMs} ms after boot`) }, crashAfterMs || 300)
  }
  const hangAfterMs = faultFile('BENCH_HANG_FILE')
  if (hangAfterMs !== null) setTimeout(function hang () { for (;;) {} }, hangAfterMs || 1000)
  const leakMBps = faultFile('BENCH_LEAK_FILE')
  if (leakMBps !== null) require('./leak').startLeak(leakMBps || 70)
  return createApp(appName)
}

function runSingle () {
  buildApp().listen(port, '127.0.0.1', () => console.log(`READY ${port}`))
}

/** The seed pattern: fork N, each app.listen(port); SIGUSR2 = rolling restart. */
function runTextbookCluster () {
  if (cluster.isWorker) {
    buildApp().listen(port, '127.0.0.1')
    return
  }
  // BENCH_WORKERS: as many workers as a clusterize contender given `workers`.
  const n = Number(process.env.BENCH_WORKERS) || os.availableParallelism()
  let reloading = false
  let listening = 0
  for (let i = 0; i < n; i++) cluster.fork()
  cluster.on('listening', function onListening () {
    if (++listening === n) console.log(`READY ${port}`)
  })
  cluster.on('exit', function onExit (worker) {
    if (!worker.exitedAfterDisconnect && !reloading) cluster.fork()
  })
  process.on('SIGUSR2', async function rollingRestart () {
    if (reloading) return
    reloading = true
    const started = Date.now()
    for (const old of Object.values(cluster.workers)) {
      const fresh = cluster.fork()
      await once(fresh, 'listening')
      old.disconnect()
      const timer = setTimeout(() => old.kill('SIGKILL'), 5000)
      await once(old, 'exit')
      clearTimeout(timer)
    }
    reloading = false
    console.log('RELOAD_DONE ' + JSON.stringify({ ok: true, durationMs: Date.now() - started }))
  })
}

function runClusterize () {
  // BENCH_CLUSTERIZE_MODULE: A/B a patched copy of the package against this one.
  const { clusterize } = require(process.env.BENCH_CLUSTERIZE_MODULE || '../..')
  const options = Object.assign({ port, host: '127.0.0.1', logger: quietLogger() }, optionsJson ? JSON.parse(optionsJson) : {})
  const handle = clusterize(buildApp, options)
  if (cluster.isWorker) return
  handle.ready.then(
    (info) => console.log(`READY ${info.port} ${handle.stats().scheduling} ${info.probesPort || 0}`),
    (err) => {
      console.error(err.message)
      process.exit(1)
    })
  handle.on('reload:done', (result) => console.log('RELOAD_DONE ' + JSON.stringify(result)))
  handle.on('upgrade:done', (result) => console.log('UPGRADE_DONE ' + JSON.stringify(result)))
}

function runPm2App () {
  buildApp().listen(port, '127.0.0.1')
}

/** Warnings and errors on stderr; lifecycle info is noise here. */
function quietLogger () {
  const write = (level) => (msg) => process.stderr.write(`[${level}] ${msg}\n`)
  return { info () {}, debug () {}, warn: write('warn'), error: write('error') }
}

const runners = { single: runSingle, cluster: runTextbookCluster, clusterize: runClusterize, 'pm2-app': runPm2App }
if (!runners[kind]) {
  console.error(`unknown server kind ${kind}`)
  process.exit(2)
}
runners[kind]()
