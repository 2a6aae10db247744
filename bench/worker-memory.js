'use strict'

/**
 * bench/worker-memory.js: what a worker's memory is made of, and what could
 * be cut.
 *
 * 1. Code: a clusterize worker (1 worker, the hello app) lists the files it
 *    has loaded (require.cache) after serving; a fresh node with --expose-gc
 *    loads Express, then every one of those files of clusterize's lib/, and
 *    reports RSS, V8 heap used and bytecode after a full GC before and after:
 *    the most lazy loading could save per worker.
 * 2. Heap and process settings: a plain Express process (no clusterize)
 *    under the same wrk load, RSS idle and loaded, with node's defaults, with
 *    the semi-space clusterize gives its workers (16 MB), 8 MB, fewer V8
 *    platform threads (--v8-pool-size=2) and fewer malloc arenas
 *    (MALLOC_ARENA_MAX=2).
 *
 *   node bench/worker-memory.js [--seconds 3] [--rounds 3]
 *
 * Loopback only, ~1 min, stops every process it started by PID. Measures only.
 */

const fs = require('fs')
const os = require('os')
const path = require('path')
const http = require('http')
const { execFileSync } = require('child_process')
const { numberArg: arg } = require('./lib/args')
const { median, fmt, markdownTable } = require('./lib/table')
const { machineLine } = require('./lib/machine')
const { installCleanup, node24, startProcess, waitForLine, waitForHttp, stopProcess, rssMiB, pssMiB, freePort, sleep } = require('./lib/proc')
const { hasWrk, wrkRun } = require('./lib/wrk')

const SECONDS = arg('--seconds', 3, 1)
const ROUNDS = arg('--rounds', 3, 1)
const NODE = node24() || process.execPath
const ROOT = path.join(__dirname, '..')
const EXPRESS = require.resolve('express', { paths: [ROOT] })

function getJson (port, pathname) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: pathname, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve(JSON.parse(body)))
    }).on('error', reject)
  })
}

/** The lib/ files a clusterize worker has loaded once it has served a request. */
async function workerLibFiles (dir) {
  const script = path.join(dir, 'worker-files.js')
  fs.writeFileSync(script, [
    "'use strict'",
    `const { clusterize } = require(${JSON.stringify(ROOT)})`,
    `const express = require(${JSON.stringify(EXPRESS)})`,
    'const port = Number(process.argv[2])',
    'const handle = clusterize(() => {',
    '  const app = express()',
    "  app.get('/', (req, res) => res.json({ hello: 'world', pid: process.pid }))",
    "  app.get('/files', (req, res) => res.json(Object.keys(require.cache)))",
    '  return app',
    "}, { port, host: '127.0.0.1', workers: 1, logger: false })",
    "if (require('cluster').isPrimary) handle.ready.then(() => console.log('READY'))",
    ''
  ].join('\n'))
  const port = await freePort()
  const proc = startProcess({ node: NODE, args: [script, String(port)], name: 'worker-files' })
  try {
    await waitForLine(proc, /^READY/, 30000)
    await getJson(port, '/')
    const files = await getJson(port, '/files')
    const lib = path.join(ROOT, 'lib') + path.sep
    return files.filter((f) => f.startsWith(lib))
  } finally {
    await stopProcess(proc)
  }
}

/** RSS, heap used and bytecode (MiB) after a full GC, before and after loading `files`, in a fresh node with Express loaded. */
function codeCost (dir, files) {
  const script = path.join(dir, 'code-cost.js')
  fs.writeFileSync(script, [
    "'use strict'",
    "const v8 = require('v8')",
    'function snap () {',
    '  global.gc(); global.gc()',
    '  const u = process.memoryUsage()',
    '  return { rss: u.rss / 1048576, heap: u.heapUsed / 1048576, code: v8.getHeapCodeStatistics().bytecode_and_metadata_size / 1048576 }',
    '}',
    `require(${JSON.stringify(EXPRESS)})`,
    'const before = snap()',
    `for (const file of ${JSON.stringify(files)}) require(file)`,
    'console.log(JSON.stringify({ before, after: snap() }))',
    ''
  ].join('\n'))
  return JSON.parse(execFileSync(NODE, ['--expose-gc', script], { encoding: 'utf8' }))
}

/** A plain Express process with `flags` (and `env`): RSS idle, RSS and PSS after wrk's load. */
async function plainExpress (dir, variant) {
  const script = path.join(dir, 'plain.js')
  if (!fs.existsSync(script)) {
    fs.writeFileSync(script, [
      "'use strict'",
      `const express = require(${JSON.stringify(EXPRESS)})`,
      'const app = express()',
      "app.get('/', (req, res) => res.json({ hello: 'world', pid: process.pid }))",
      "app.listen(Number(process.argv[2]), '127.0.0.1', () => console.log('READY'))",
      ''
    ].join('\n'))
  }
  const port = await freePort()
  const proc = startProcess({ node: NODE, args: variant.flags.concat([script, String(port)]), env: variant.env, name: variant.label })
  try {
    await waitForLine(proc, /^READY/, 20000)
    await waitForHttp(port, 10000)
    await sleep(500)
    const idle = rssMiB(proc.pid)
    await wrkRun({ port, connections: 50, seconds: SECONDS })
    await sleep(300)
    return { idle, loaded: rssMiB(proc.pid), pss: pssMiB(proc.pid) }
  } finally {
    await stopProcess(proc)
  }
}

const VARIANTS = [
  { label: "node's defaults", flags: [], env: {} },
  { label: '--max-semi-space-size=16 (what clusterize gives its workers)', flags: ['--max-semi-space-size=16'], env: {} },
  { label: '--max-semi-space-size=8', flags: ['--max-semi-space-size=8'], env: {} },
  { label: '--max-semi-space-size=16 --v8-pool-size=2', flags: ['--max-semi-space-size=16', '--v8-pool-size=2'], env: {} },
  { label: '--max-semi-space-size=16, MALLOC_ARENA_MAX=2', flags: ['--max-semi-space-size=16'], env: { MALLOC_ARENA_MAX: '2' } }
]

async function main () {
  installCleanup()
  if (!hasWrk()) throw new Error('bench/worker-memory.js needs wrk (Debian/Ubuntu package `wrk`)')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-worker-memory-'))
  try {
    const files = await workerLibFiles(dir)
    const cost = codeCost(dir, files)
    const rows = new Map(VARIANTS.map((v) => [v.label, []]))
    for (let round = 0; round < ROUNDS; round++) {
      for (const variant of VARIANTS) rows.get(variant.label).push(await plainExpress(dir, variant))
    }
    console.log("## Worker memory: clusterize's code in a worker, and heap settings\n")
    console.log(machineLine(`servers on ${execFileSync(NODE, ['-v'], { encoding: 'utf8' }).trim()}`))
    console.log(`1-minute load average at the end: ${os.loadavg()[0].toFixed(1)} on ${os.availableParallelism()} cores.\n`)
    console.log(`A clusterize worker serving the hello app had loaded ${files.length} files of clusterize's lib/. Loaded into a fresh node that already holds Express, after a full GC:\n`)
    const d = (key) => fmt(cost.after[key] - cost.before[key], 2)
    console.log(markdownTable(["clusterize's worker-side code", 'RSS MiB', 'V8 heap used MiB', 'bytecode MiB'], [
      ['node + Express', fmt(cost.before.rss, 1), fmt(cost.before.heap, 2), fmt(cost.before.code, 2)],
      [`+ the ${files.length} lib/ files a worker loads`, fmt(cost.after.rss, 1), fmt(cost.after.heap, 2), fmt(cost.after.code, 2)],
      ['difference: the most lazy loading could save', d('rss'), d('heap'), d('code')]
    ]))
    console.log(`\n### Heap and process settings: one plain Express process (no clusterize), wrk -t1 -c50 ${SECONDS} s, ${ROUNDS} rounds, medians\n`)
    console.log(markdownTable(['settings', 'RSS idle MiB', 'RSS after load MiB', 'PSS after load MiB'], VARIANTS.map((v) => {
      const runs = rows.get(v.label)
      const m = (key) => median(runs.map((r) => r[key]))
      return [v.label, fmt(m('idle'), 1), fmt(m('loaded'), 1), fmt(m('pss'), 1)]
    })))
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 1
})
