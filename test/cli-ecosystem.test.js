'use strict'

/**
 * `clusterize start ecosystem.config.js`: a PM2 ecosystem file's fields that
 * mean something to clusterize are translated, the others are named in one
 * warning, and a real cluster started from such a file serves with as many
 * workers as `instances` says, each with PM2's NODE_APP_INSTANCE. Loopback
 * only; every process started here is killed by PID in `after`.
 */

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')

const { readEcosystem, isEcosystemFile } = require('../lib/cli/ecosystem')
const { parseArgs } = require('../lib/cli/args')
const { availableCpus } = require('../lib/cpus')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { runCli, startCli, httpGet: get, cliScratch } = require('./helpers/cli')

const { tmp, tracked } = cliScratch('eco')
/** Over helpers/cli's CLI_ENV: no instance number from an outer PM2. */
const ENV = { NODE_APP_INSTANCE: '' }

let files = 0
/** An ecosystem file in a directory of its own; returns its path. */
function writeEcosystem (apps, name) {
  const dir = path.join(tmp, `eco-${++files}`)
  fs.mkdirSync(dir)
  const file = path.join(dir, name || 'ecosystem.config.js')
  fs.writeFileSync(file, `module.exports = ${JSON.stringify({ apps })}\n`)
  return file
}

function run (args) {
  return runCli(args, { cwd: tmp, env: ENV })
}

describe('reading an ecosystem file', () => {
  test('ecosystem file names are told apart from app files', () => {
    for (const name of ['ecosystem.config.js', 'ecosystem.config.cjs', 'ecosystem.json', 'prod.ecosystem.config.js', 'pm2.config.js', 'dir/ecosystem-prod.config.js']) assert.ok(isEcosystemFile(name), name)
    for (const name of ['app.js', 'server.js', 'ecosystem-app/server.js', 'myecosystem.js']) assert.ok(!isEcosystemFile(name), name)
  })

  test('clusterize start FILE is clusterize FILE; a lone start is still an app file', () => {
    assert.deepStrictEqual(parseArgs(['start', 'ecosystem.config.js', '--workers', '2']), { command: 'start', app: 'ecosystem.config.js', flags: { workers: 2 } })
    assert.strictEqual(parseArgs(['start']).app, 'start')
  })

  test('the fields with a clusterize meaning are translated, the rest named', () => {
    const file = writeEcosystem([{
      name: 'api',
      script: './server.js',
      instances: 3,
      exec_mode: 'cluster',
      max_memory_restart: '1G',
      kill_timeout: 3000,
      listen_timeout: 8000,
      wait_ready: true,
      env: { NODE_ENV: 'production', PORT: 8080, DEBUG_COLORS: false },
      env_production: { NODE_ENV: 'production' },
      watch: true,
      autorestart: true
    }])
    const eco = readEcosystem(file)
    assert.strictEqual(eco.script, path.join(path.dirname(file), 'server.js'), 'script is relative to the file')
    assert.deepStrictEqual(eco.flags, { workers: 3 })
    assert.deepStrictEqual(eco.options, { health: { maxMemoryMB: 1024 }, shutdown: { timeoutMs: 3000 }, reload: { readyTimeoutMs: 8000 }, watch: { paths: [path.dirname(file)] } })
    assert.deepStrictEqual(eco.env, { NODE_ENV: 'production', PORT: '8080', DEBUG_COLORS: 'false' })
    assert.strictEqual(eco.instanceVar, 'NODE_APP_INSTANCE')
    assert.deepStrictEqual(eco.ignored, ['env_production (select it with --env production)', 'autorestart'])
  })

  test('PM2 instance counts and memory sizes', () => {
    const workers = (instances) => readEcosystem(writeEcosystem([{ script: 'a.js', instances }])).flags.workers
    assert.strictEqual(workers('max'), 'auto')
    assert.strictEqual(workers(0), 'auto')
    assert.strictEqual(workers('4'), 4)
    assert.strictEqual(workers(-1), Math.max(1, availableCpus() - 1))
    const memory = (size) => readEcosystem(writeEcosystem([{ script: 'a.js', max_memory_restart: size }])).options.health.maxMemoryMB
    assert.strictEqual(memory('300M'), 300)
    assert.strictEqual(memory('2048K'), 2)
    assert.strictEqual(memory(200 * 1024 * 1024), 200)
    const fork = readEcosystem(writeEcosystem([{ script: 'a.js', exec_mode: 'fork', cwd: 'src' }]))
    assert.match(fork.ignored[0], /^exec_mode \("fork"/)
    assert.strictEqual(path.basename(path.dirname(fork.script)), 'src', 'cwd is where script is found')
  })

  test('a bad field fails naming the file and the field', () => {
    const cases = [
      [[{ script: 'a.js', instances: 'many' }], /apps\[0\]\.instances must be/],
      [[{ script: 'a.js', max_memory_restart: 'lots' }], /apps\[0\]\.max_memory_restart must be/],
      [[{ script: 'a.js', max_memory_restart: '512K' }], /max_memory_restart must be a size of at least 1M/],
      [[{ script: 'a.js', kill_timeout: -1 }], /apps\[0\]\.kill_timeout must be/],
      [[{ script: 'a.js', env: { A: { nested: 1 } } }], /apps\[0\]\.env\.A must be/],
      [[{ instances: 2 }], /apps\[0\]\.script must name the app file/],
      [[{ script: 'a.js' }, { script: 'b.js' }], /"apps" has 2 entries/]
    ]
    for (const [apps, message] of cases) {
      const file = writeEcosystem(apps)
      assert.throws(() => readEcosystem(file), (err) => err.code === 'ERR_CLUSTERIZE_CLI_USAGE' && message.test(err.message) && err.message.startsWith(file))
    }
  })

  test('on the command line a bad file exits 2 before anything forks', async () => {
    const result = await run(['start', writeEcosystem([{ script: 'a.js', instances: 'many' }])])
    assert.strictEqual(result.code, 2, result.stderr)
    assert.match(result.stderr, /apps\[0\]\.instances must be/)
    const broken = writeEcosystem([])
    fs.writeFileSync(broken, 'module.exports = { apps: [\n')
    const unreadable = await run([broken])
    assert.strictEqual(unreadable.code, 2, unreadable.stderr)
    assert.match(unreadable.stderr, /cannot read the ecosystem file .*: Unexpected/)
    const missing = await run([path.join(tmp, 'nowhere', 'ecosystem.config.js')])
    assert.strictEqual(missing.code, 2, missing.stderr)
    assert.match(missing.stderr, /cannot find the ecosystem file/)
  })
})

describe('clusterize start ecosystem.config.js: a real cluster', () => {
  const pidFile = path.join(tmp, 'run', 'eco.pid')
  let port
  let cli
  let child
  let exited
  let file

  before(async () => {
    port = await freePort()
    file = writeEcosystem([{
      name: 'hello',
      script: './app.js',
      instances: 2,
      exec_mode: 'cluster',
      max_memory_restart: '500M',
      kill_timeout: 5000,
      listen_timeout: 20000,
      env: { PORT: port, GREETING: 'from the ecosystem file' },
      watch: false,
      autorestart: true,
      source_map_support: true
    }])
    // A (req, res) listener that says which instance answered.
    fs.writeFileSync(path.join(path.dirname(file), 'app.js'), `module.exports = (req, res) => {
  res.setHeader('content-type', 'application/json')
  res.end(JSON.stringify({ pid: process.pid, instance: process.env.NODE_APP_INSTANCE, greeting: process.env.GREETING }))
}
`)
    // Started from another directory: script is found next to the file.
    cli = await startCli(['start', path.relative(tmp, file), '--host', '127.0.0.1', '--pid-file', pidFile], { cwd: tmp, env: ENV, pidFile, tracked })
    child = cli.child
    exited = cli.exited
  })

  after(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await exited
    }
  })

  test('names the fields it ignores, once, and not the ones it uses', () => {
    const warnings = cli.output.split('\n').filter((line) => line.includes('ignoring what clusterize has no use for'))
    assert.strictEqual(warnings.length, 1, cli.output)
    assert.match(warnings[0], /: autorestart, source_map_support \(see docs\/coming-from-pm2\.md\)$/)
  })

  test('serves on the port from its env, with as many workers as instances, each with its NODE_APP_INSTANCE', async () => {
    const status = await run(['status', '--pid-file', pidFile, '--json'])
    assert.strictEqual(status.code, 0, status.stderr)
    const stats = JSON.parse(status.stdout)
    assert.strictEqual(stats.workers.length, 2)
    for (const worker of stats.workers) tracked.add(worker.pid)

    const instances = new Map()
    await eventually(async () => {
      const res = await get(port)
      assert.strictEqual(res.status, 200)
      assert.strictEqual(res.json.greeting, 'from the ecosystem file')
      instances.set(res.json.pid, res.json.instance)
      return instances.size >= 2
    }, { timeoutMs: 30000, intervalMs: 50, what: 'answers from both workers' })
    const bySlot = new Map(stats.workers.map((w) => [w.pid, String(w.id)]))
    assert.deepStrictEqual(instances, bySlot, 'NODE_APP_INSTANCE is the worker slot')
  })

  test('a reload after the file was broken rolls back, and the old workers keep serving', async () => {
    // New workers read the file again; one that cannot must fail the canary, not the service.
    fs.writeFileSync(file, 'module.exports = { apps: [\n')
    const result = await run(['reload', '--pid-file', pidFile])
    assert.strictEqual(result.code, 1, result.stdout + result.stderr)
    assert.match(result.stdout + result.stderr, /roll/i)
    const res = await get(port)
    assert.strictEqual(res.status, 200)
    assert.strictEqual(res.json.greeting, 'from the ecosystem file')
  })

  test('clusterize stop ends it', async () => {
    const result = await run(['stop', '--pid-file', pidFile])
    assert.strictEqual(result.code, 0, result.stderr)
    assert.deepStrictEqual(await exited, { code: 0, signal: null })
  })
})
