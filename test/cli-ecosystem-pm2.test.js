'use strict'

/**
 * What a PM2 user's ecosystem file relies on beyond the basics
 * (cli-ecosystem.test.js): `--env NAME` applies env_NAME over env, `--only
 * NAME` picks one app of several (each with its own pid file), max_restarts
 * / min_uptime become the crash-loop breaker's budget, cron_restart is a
 * rolling reload on a schedule (lib/primary/cron-schedule.js), and watch
 * reloads on a change outside node_modules. Real clusters on loopback; every
 * process started here is killed by PID in `after`.
 */

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')

const { readEcosystem } = require('../lib/cli/ecosystem')
const { parseArgs, buildOptions } = require('../lib/cli/args')
const { parseCron, nextFire } = require('../lib/primary/cron-schedule')
const { resolveConfig } = require('../lib/config')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { runCli, startCli, httpGet: get, cliScratch } = require('./helpers/cli')

const { tmp, tracked } = cliScratch('pm2')
const ENV = { NODE_APP_INSTANCE: '', NODE_ENV: '' }

let files = 0
function writeEcosystem (apps) {
  const dir = path.join(tmp, `eco-${++files}`)
  fs.mkdirSync(dir)
  const file = path.join(dir, 'ecosystem.config.js')
  fs.writeFileSync(file, `module.exports = ${JSON.stringify({ apps })}\n`)
  return file
}

function run (args) {
  return runCli(args, { cwd: tmp, env: ENV })
}

const usage = (pattern) => (err) => err.code === 'ERR_CLUSTERIZE_CLI_USAGE' && pattern.test(err.message)

describe('--env and --only', () => {
  const apps = [
    { name: 'api', script: 'api.js', env: { API: 'http://dev.local', LEVEL: 'debug' }, env_production: { API: 'http://api.prod' }, env_staging: { API: 'http://api.staging' } },
    { name: 'jobs', script: 'jobs.js', instances: 1 }
  ]

  test('--env NAME applies env_NAME over env; without it the env_ blocks are named with the flag', () => {
    const file = writeEcosystem([apps[0]])
    assert.deepStrictEqual(readEcosystem(file, { env: 'production' }).env, { API: 'http://api.prod', LEVEL: 'debug' })
    assert.deepStrictEqual(readEcosystem(file, { env: 'production' }).ignored, [])
    const plain = readEcosystem(file)
    assert.deepStrictEqual(plain.env, { API: 'http://dev.local', LEVEL: 'debug' })
    assert.deepStrictEqual(plain.ignored, ['env_production (select it with --env production)', 'env_staging (select it with --env staging)'])
    assert.throws(() => readEcosystem(file, { env: 'prod' }), usage(/--env prod: .*apps\[0\]\.env_prod does not exist \(the app has env_production, env_staging\)/))
    assert.deepStrictEqual(parseArgs(['ecosystem.config.js', '--env', 'production']).flags, { env: 'production' })
    assert.throws(() => parseArgs(['ecosystem.config.js', '--env', '../x']), usage(/--env must be a name/))
  })

  test('--only NAME picks one app of several; several without it say how to run each', () => {
    const file = writeEcosystem(apps)
    const jobs = readEcosystem(file, { only: 'jobs' })
    assert.strictEqual(path.basename(jobs.script), 'jobs.js')
    assert.deepStrictEqual(jobs.flags, { workers: 1 })
    assert.throws(() => readEcosystem(file), usage(/"apps" has 2 entries \(api, jobs\); clusterize runs one app per primary: start each with --only NAME, e.g. `clusterize .* --only api`/))
    assert.throws(() => readEcosystem(file, { only: 'web' }), usage(/--only web: .* has no app named "web" \(its apps: api, jobs\)/))
    assert.deepStrictEqual(parseArgs(['stop', '--only', 'api']), { command: 'stop', app: null, flags: { only: 'api' } })
  })

  test('--env and --only on an app file are refused before anything forks', async () => {
    const app = path.join(tmp, 'plain-app.js')
    fs.writeFileSync(app, 'module.exports = (req, res) => res.end()\n')
    const result = await run([app, '--env', 'production'])
    assert.strictEqual(result.code, 2, result.stderr)
    assert.match(result.stderr, /--env applies to PM2 ecosystem files only/)
  })
})

describe('restart policy, cron_restart and watch from the file', () => {
  test('max_restarts and min_uptime become the breaker: a crash after min_uptime does not count, max_restarts crashes within the time one worker takes to crash that often living min_uptime each', () => {
    const file = writeEcosystem([{ script: 'a.js', max_restarts: 3, min_uptime: '2s', exp_backoff_restart_delay: 200 }])
    const { options, ignored } = readEcosystem(file)
    // 3 × 2000 ms of uptime, plus the restart delays before the 2nd and 3rd restart (200, 400 ms).
    // A crash after min_uptime is not a crash loop in PM2, nor after restart.stableAfterMs here.
    assert.deepStrictEqual(options.restart, { maxCrashes: 3, backoffInitialMs: 200, crashWindowMs: 6600, stableAfterMs: 2000 })
    assert.deepStrictEqual(ignored, [])
    assert.doesNotThrow(() => resolveConfig({ restart: options.restart }, {}))
    assert.deepStrictEqual(readEcosystem(writeEcosystem([{ script: 'a.js', max_restarts: 10 }])).options.restart, { maxCrashes: 10 })
    assert.throws(() => readEcosystem(writeEcosystem([{ script: 'a.js', max_restarts: 0 }])), usage(/apps\[0\]\.max_restarts must be a whole number/))
    assert.throws(() => readEcosystem(writeEcosystem([{ script: 'a.js', min_uptime: 'soon' }])), usage(/apps\[0\]\.min_uptime must be milliseconds/))
  })

  test('cron_restart becomes reload.cron, watch the watch option (node_modules and .git always ignored)', () => {
    const file = writeEcosystem([{ script: 'a.js', cron_restart: '0 3 * * *', watch: ['src'], ignore_watch: ['*.log'] }])
    const { options } = readEcosystem(file)
    assert.deepStrictEqual(options.reload, { cron: '0 3 * * *' })
    assert.deepStrictEqual(options.watch, { paths: [path.join(path.dirname(file), 'src')], ignore: ['*.log'] })
    assert.deepStrictEqual(resolveConfig({ watch: options.watch }, {}).watch.ignore, ['node_modules', '.git', '*.log'])
    assert.throws(() => readEcosystem(writeEcosystem([{ script: 'a.js', cron_restart: '0 25 * * *' }])), usage(/apps\[0\]\.cron_restart: "0 25 \* \* \*": "25" is not a valid hour/))
    assert.throws(() => resolveConfig({ reload: { cron: '* * *' } }, {}), /option "reload\.cron" must be a cron expression/)
    assert.throws(() => resolveConfig({ watch: 'src' }, {}), /option "watch" must be true, a list of paths/)
    assert.deepStrictEqual(resolveConfig(buildOptions(parseArgs(['app.js', '--watch']).flags, {}), {}).watch, { paths: null, ignore: ['node_modules', '.git'], debounceMs: 500 })
    assert.deepStrictEqual(readEcosystem(writeEcosystem([{ script: 'a.js', watch: false, ignore_watch: ['x'] }])).ignored, ['ignore_watch (watch is off)'])
  })

  test('the cron parser: fields, steps, names, macros, and the day-of-month OR day-of-week rule', () => {
    const at = new Date(2026, 10, 28, 22, 35, 10) // a Saturday
    const next = (expression) => nextFire(parseCron(expression), at)
    assert.deepStrictEqual(next('0 3 * * *'), new Date(2026, 10, 29, 3, 0, 0))
    assert.deepStrictEqual(next('*/15 * * * *'), new Date(2026, 10, 28, 22, 45, 0))
    assert.deepStrictEqual(next('*/5 * * * * *'), new Date(2026, 10, 28, 22, 35, 15))
    assert.deepStrictEqual(next('0 9 * * MON-FRI'), new Date(2026, 10, 30, 9, 0, 0))
    assert.deepStrictEqual(next('@monthly'), new Date(2026, 11, 1, 0, 0, 0))
    assert.deepStrictEqual(next('0 0 29 FEB *'), new Date(2028, 1, 29, 0, 0, 0))
    assert.deepStrictEqual(next('0 0 13 * 5'), new Date(2026, 11, 4, 0, 0, 0), 'the 13th or a Friday, as cron')
    assert.deepStrictEqual(next('0 0 * * 7'), new Date(2026, 10, 29, 0, 0, 0), '7 is Sunday')
    for (const bad of ['', '* * *', '60 * * * *', '5-1 * * * *', '0 0 31 2 *', '*/0 * * * *']) assert.throws(() => parseCron(bad), Error, bad)
  })
})

describe('a file with two apps: --only api --env production, with watch', () => {
  let port
  let cli
  let dir
  let pidFile

  before(async () => {
    port = await freePort()
    const file = writeEcosystem([
      { name: 'api', script: './api.js', instances: 1, env: { PORT: port, API: 'http://dev.local' }, env_production: { API: 'http://api.prod' }, watch: true },
      { name: 'jobs', script: './jobs.js' }
    ])
    dir = path.dirname(file)
    fs.writeFileSync(path.join(dir, 'api.js'), 'module.exports = (req, res) => res.end(JSON.stringify({ api: process.env.API, generation: process.env.CLUSTERIZE_GENERATION }))\n')
    fs.mkdirSync(path.join(dir, 'node_modules', 'dep'), { recursive: true })
    // Outside the watched directory (the pid file is written after the watch starts).
    pidFile = path.join(tmp, 'run', 'api.pid')
    cli = await startCli(['start', file, '--only', 'api', '--env', 'production', '--host', '127.0.0.1', '--bake-ms', '0', '--pid-file', pidFile], { cwd: dir, env: ENV, pidFile, tracked })
  })

  after(async () => {
    if (cli && cli.child.exitCode === null && cli.child.signalCode === null) {
      cli.child.kill('SIGKILL')
      await cli.exited
    }
  })

  test('the app gets env_production over env', async () => {
    const res = await get(port)
    assert.strictEqual(res.json.api, 'http://api.prod')
    assert.doesNotMatch(cli.output, /ignoring what clusterize has no use for/)
  })

  test('a change under node_modules is ignored; one in the app reloads the workers, also in a folder made after the start', async () => {
    const status = JSON.parse((await run(['status', '--pid-file', pidFile, '--json'])).stdout)
    for (const worker of status.workers) tracked.add(worker.pid)
    const answersFrom = (generation) => eventually(async () => {
      const answer = await get(port)
      return answer.json.generation === generation && answer.json
    }, { timeoutMs: 60000, intervalMs: 200, what: () => `an answer from generation ${generation}:\n` + cli.output })
    fs.writeFileSync(path.join(dir, 'node_modules', 'dep', 'index.js'), 'module.exports = 1\n')
    fs.mkdirSync(path.join(dir, 'routes'))
    await answersFrom('2')
    fs.writeFileSync(path.join(dir, 'routes', 'users.js'), 'module.exports = []\n')
    await answersFrom('3')
    const changes = cli.output.split('\n').filter((line) => /watch: .* changed/.test(line)).map((line) => line.replace(/^.*watch: /, ''))
    assert.deepStrictEqual(changes, ['routes changed: starting a rolling reload', `${path.join('routes', 'users.js')} changed: starting a rolling reload`], cli.output)
  })

  test('clusterize stop ends it', async () => {
    const result = await run(['stop', '--pid-file', pidFile])
    assert.strictEqual(result.code, 0, result.stderr)
    assert.deepStrictEqual(await cli.exited, { code: 0, signal: null })
  })
})

describe('--only picks the default pid file, and cron_restart reloads on schedule', () => {
  let cli
  let dir
  const only = 'ticker'

  before(async () => {
    const port = await freePort()
    const file = writeEcosystem([
      { name: 'web', script: './web.js' },
      { name: only, script: './web.js', instances: 1, env: { PORT: port }, cron_restart: '*/2 * * * * *' }
    ])
    dir = path.dirname(file)
    fs.writeFileSync(path.join(dir, 'web.js'), 'module.exports = (req, res) => res.end("ok")\n')
    // No --pid-file: the default for this directory and this app.
    const { pidFilePath } = require('../lib/cli/control')
    const pidFile = runInDir(dir, () => pidFilePath({ only }, Object.assign({}, process.env, ENV)))
    assert.notStrictEqual(pidFile, runInDir(dir, () => pidFilePath({}, Object.assign({}, process.env, ENV))), 'each app of the file has its own')
    cli = await startCli(['ecosystem.config.js', '--only', only, '--host', '127.0.0.1', '--bake-ms', '0'], { cwd: dir, env: ENV, pidFile, tracked })
  })

  after(async () => {
    if (cli && cli.child.exitCode === null && cli.child.signalCode === null) {
      cli.child.kill('SIGKILL')
      await cli.exited
    }
  })

  test('status --only finds it, and the cron schedule has reloaded the workers twice', async () => {
    await eventually(async () => {
      const status = await runCli(['status', '--only', only, '--json'], { cwd: dir, env: ENV })
      assert.strictEqual(status.code, 0, status.stderr)
      const stats = JSON.parse(status.stdout)
      for (const worker of stats.workers) tracked.add(worker.pid)
      return stats.workers.length === 1 && stats.workers[0].generation >= 3
    }, { timeoutMs: 60000, intervalMs: 500, what: () => 'two cron reloads:\n' + cli.output })
    assert.match(cli.output, /reload\.cron "\*\/2 \* \* \* \* \*": starting a rolling reload/)
  })

  test('stop --only ends it', async () => {
    const result = await runCli(['stop', '--only', only], { cwd: dir, env: ENV })
    assert.strictEqual(result.code, 0, result.stderr)
    assert.deepStrictEqual(await cli.exited, { code: 0, signal: null })
  })
})

function runInDir (dir, fn) {
  const previous = process.cwd()
  process.chdir(dir)
  try {
    return fn()
  } finally {
    process.chdir(previous)
  }
}
