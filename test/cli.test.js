'use strict'

/**
 * The `clusterize` CLI on examples/hello/app.js, an Express app with no
 * clusterize import: start, status, reload and stop through the pid file;
 * usage errors; --help; the banner and the JSON logger. Everything runs on
 * loopback, and every process started here is killed by PID in `after`.
 */

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert')
const { spawn } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

const { FLAGS } = require('../lib/cli/args')
const { formatBanner } = require('../lib/cli/banner')
const { defaultScheduling } = require('../lib/primary/scheduling')
const { createJsonLogger } = require('../lib/cli/json-logger')
const { version } = require('../package.json')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { isAlive } = require('../lib/process-alive')
const { HELLO_APP: APP, CLI_BIN, runCli, startCli, httpGet: get, cliScratch } = require('./helpers/cli')

const { tmp, tracked } = cliScratch('cli')


/** Run the CLI to completion. */
function run (args, options = {}) {
  return runCli(args, { cwd: options.cwd || tmp, env: options.env })
}

/** How long and how often the checks below poll. */
const POLL = { timeoutMs: 30000, intervalMs: 50 }

describe('clusterize app.js: start, status, reload, stop', () => {
  const pidFile = path.join(tmp, 'run', 'hello.pid')
  let port
  let cli
  let child
  let exited
  let firstPids

  before(async () => {
    port = await freePort()
    cli = await startCli([APP, '--workers', '2', '--bake-ms', '0', '--port', String(port), '--host', '127.0.0.1', '--pid-file', pidFile], { cwd: tmp, pidFile, tracked, poll: POLL })
    child = cli.child
    exited = cli.exited
  })

  test('writes the pid file and prints the banner', () => {
    const info = JSON.parse(fs.readFileSync(pidFile, 'utf8'))
    assert.strictEqual(info.pid, child.pid)
    assert.strictEqual(info.port, port)
    assert.ok(Number.isInteger(info.probesPort) && info.probesPort > 0)
    assert.match(cli.output, /ready with 2 workers/)
    assert.match(cli.output, new RegExp(`primary +pid ${child.pid}`))
    assert.match(cli.output, new RegExp(`scheduling +${defaultScheduling().mode}`), 'no --scheduling: the default mode for this platform')
    assert.doesNotMatch(cli.output, /\x1b\[/, 'no colours when stdout is not a TTY')
  })

  test('answers 200 from two different worker pids', async () => {
    const pids = new Set()
    await eventually(async () => {
      const res = await get(port)
      assert.strictEqual(res.status, 200)
      pids.add(res.json.pid)
      return pids.size >= 2
    }, { ...POLL, what: 'two worker pids' })
    assert.strictEqual(pids.size, 2)
    assert.ok(!pids.has(child.pid), 'the primary serves no requests')
    for (const pid of pids) tracked.add(pid)
    firstPids = pids
  })

  test('clusterize status prints the workers table', async () => {
    const result = await run(['status', '--pid-file', pidFile])
    assert.strictEqual(result.code, 0, result.stderr)
    assert.match(result.stdout, /slot +pid +generation +state/)
    for (const pid of firstPids) assert.match(result.stdout, new RegExp(`^\\d+ +${pid} +1 +ready`, 'm'))
    const info = JSON.parse(fs.readFileSync(pidFile, 'utf8'))
    const direct = await run(['status', '--probes-port', String(info.probesPort), '--json'])
    assert.strictEqual(direct.code, 0, direct.stderr)
    const stats = JSON.parse(direct.stdout)
    assert.strictEqual(stats.pid, child.pid)
    assert.deepStrictEqual(new Set(stats.workers.map((w) => w.pid)), firstPids)
  })

  test('a second start on the same pid file is refused', async () => {
    const result = await run([APP, '--workers', '1', '--port', '0', '--pid-file', pidFile])
    assert.strictEqual(result.code, 1)
    assert.match(result.stderr, /already running: primary pid \d+/)
    assert.strictEqual(JSON.parse(fs.readFileSync(pidFile, 'utf8')).pid, child.pid)
  })

  test('clusterize reload replaces every worker', async () => {
    const result = await run(['reload', '--pid-file', pidFile])
    assert.strictEqual(result.code, 0, result.stderr + '\n' + cli.output)
    // The pid file's directory exists before the control socket listens, so it answers.
    assert.match(result.stdout, /reload done: generation 2, 2 worker\(s\) replaced in \d+ ms/)
    const fresh = new Set()
    await eventually(async () => {
      const res = await get(port)
      assert.strictEqual(res.status, 200)
      tracked.add(res.json.pid)
      if (!firstPids.has(res.json.pid)) fresh.add(res.json.pid)
      return fresh.size >= 2
    }, { ...POLL, what: 'two new worker pids' })
    for (const pid of firstPids) {
      await eventually(() => !isAlive(pid), { ...POLL, what: `old worker ${pid} to exit` })
    }
  })

  test('clusterize stop exits the primary and every worker', async () => {
    const status = await run(['status', '--pid-file', pidFile, '--json'])
    for (const w of JSON.parse(status.stdout).workers) tracked.add(w.pid)
    const result = await run(['stop', '--pid-file', pidFile])
    assert.strictEqual(result.code, 0, result.stderr)
    assert.match(result.stdout, new RegExp(`stopped: primary ${child.pid}`))
    const { code, signal } = await exited
    assert.strictEqual(code, 0, cli.output)
    assert.strictEqual(signal, null)
    assert.ok(!fs.existsSync(pidFile), 'the pid file is removed')
    for (const pid of tracked) assert.ok(!isAlive(pid), `pid ${pid} is gone`)
  })

  test('commands after the stop say there is nothing running', async () => {
    const result = await run(['reload', '--pid-file', pidFile])
    assert.strictEqual(result.code, 1)
    assert.match(result.stderr, /no pid file at/)
  })
})

describe('pid file edge cases', () => {
  test('a stale pid file gets a clear message and is removed', async () => {
    const dead = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' })
    await new Promise((resolve) => dead.once('exit', resolve))
    const file = path.join(tmp, 'stale.pid')
    fs.writeFileSync(file, JSON.stringify({ pid: dead.pid, port: 1, probesPort: 2, script: 'clusterize.js' }))
    const result = await run(['stop', '--pid-file', file])
    assert.strictEqual(result.code, 1)
    assert.match(result.stderr, new RegExp(`stale pid file .*process ${dead.pid} is not running`))
    assert.ok(!fs.existsSync(file))
  })
})

describe('usage errors exit with code 2 before anything forks', () => {
  const cases = [
    { args: [APP, '--bogus'], message: /unknown flag --bogus/ },
    { args: [APP, '--prot', '3000'], message: /unknown flag --prot \(did you mean --port\?\)/ },
    { args: [APP, '--port'], message: /--port needs a value/ },
    { args: [APP, '--workers', '--json'], message: /--workers needs a value/ },
    { args: [APP, '--port', 'http'], message: /--port must be a port number from 0 to 65535, got "http"/ },
    { args: [APP, '--port', '70000'], message: /--port must be a port number/ },
    { args: [APP, '--workers', 'many'], message: /--workers must be a number from 0 to 1024 or "auto"/ },
    { args: [APP, '--scheduling', 'random'], message: /--scheduling must be one of rr, none, reuseport, sticky, balanced, got "random"/ },
    { args: [APP, '--probes-port', 'x'], message: /--probes-port must be a port number/ },
    { args: [APP, '--json=yes'], message: /--json takes no value/ },
    { args: [APP, '--host', ''], message: /--host needs a non-empty value/ },
    { args: [APP, '--bake-ms', '1.5'], message: /--bake-ms must be a whole number of milliseconds from 0 to 2147483647, got "1.5"/ },
    { args: [APP, '--reload-signal', 'SIGFOO'], message: /--reload-signal must be one of SIGUSR2, SIGHUP, SIGUSR1, got "SIGFOO"/ },
    { args: [APP, '--reload-signal', 'SIGKILL'], message: /--reload-signal must be one of SIGUSR2, SIGHUP, SIGUSR1, got "SIGKILL"/ },
    { args: ['reload', '--reload-signal', 'SIGHUP'], message: /--reload-signal does not apply to clusterize reload/ },
    { args: ['status', '--workers', '2'], message: /--workers does not apply to clusterize status/ },
    { args: ['stop', 'app.js'], message: /unexpected argument "app.js"/ },
    { args: [], message: /missing the app file/ },
    { args: ['missing-app.js'], message: /cannot find the app file "missing-app.js"/ },
    { args: [APP], env: { WORKERS: 'lots' }, message: /option "workers" must be .*from the environment variable WORKERS/ },
    { args: [APP], env: { PORT: 'eighty' }, message: /option "port" must be .*from the environment variable PORT/ }
  ]
  for (const { args, env, message } of cases) {
    test(`clusterize ${args.map((a) => a === APP ? 'app.js' : a).join(' ')}${env ? ' with ' + JSON.stringify(env) : ''}`, async () => {
      const result = await run(args, { env })
      assert.strictEqual(result.code, 2, result.stderr)
      assert.match(result.stderr, message)
      assert.match(result.stderr, /clusterize --help/)
      assert.doesNotMatch(result.stderr + result.stdout, /starting|ready/)
    })
  }
})

describe('--help and --version', () => {
  test('--help lists every flag, the env fallbacks and examples', async () => {
    const result = await run(['--help'])
    assert.strictEqual(result.code, 0)
    for (const flag of Object.keys(FLAGS)) assert.ok(result.stdout.includes(flag), `--help mentions ${flag}`)
    for (const command of ['reload', 'stop', 'status']) assert.match(result.stdout, new RegExp(`clusterize ${command}`))
    for (const env of ['PORT', 'WORKERS', 'REDIS_URL']) assert.match(result.stdout, new RegExp(`env ${env}`))
    assert.match(result.stdout, /Examples/)
    assert.match(result.stdout, /Exit codes/)
  })

  test('-h is --help, --version prints the package version', async () => {
    const short = await run(['-h'])
    assert.match(short.stdout, /^clusterize /)
    const result = await run(['--version'])
    assert.strictEqual(result.code, 0)
    assert.strictEqual(result.stdout.trim(), version)
  })

  test('a client command whose reader went away (`clusterize --help | head -0`) ends quietly with 0, no stack trace', async () => {
    // The read end is closed before node has even loaded the CLI, so its first write meets EPIPE.
    const child = spawn(process.execPath, [CLI_BIN, '--help'], { stdio: ['ignore', 'pipe', 'pipe'] })
    child.stdout.destroy()
    let stderr = ''
    child.stderr.on('data', (chunk) => { stderr += chunk })
    const [code] = await new Promise((resolve) => child.once('close', (...args) => resolve(args)))
    assert.strictEqual(stderr, '')
    assert.strictEqual(code, 0)
  })
})

describe('banner and JSON logger', () => {
  const stats = {
    pid: 100,
    port: 3000,
    scheduling: 'sticky',
    workers: [
      { id: 0, pid: 101, generation: 1, state: 'ready', uptimeMs: 1200, restarts: 0, heartbeat: {}, session: { store: 'redis', available: true, lastError: null } },
      { id: 1, pid: 102, generation: 1, state: 'starting', uptimeMs: 90000, restarts: 2, heartbeat: {}, session: { store: 'redis', available: true, lastError: null } }
    ],
    bus: { role: 'primary', bridge: { connected: true, host: '10.0.0.5:6379', channel: 'clusterize:bus' } }
  }

  test('one table: workers, port, scheduling, session store, bus bridge', () => {
    const text = formatBanner(stats, { version: '1.2.3', app: 'app.js', probesPort: 9090 })
    assert.match(text, /clusterize-express 1\.2\.3: app\.js ready with 2 workers/)
    assert.match(text, /listening +port 3000 on all interfaces/)
    assert.match(text, /scheduling +sticky/)
    assert.match(text, /sessions +redis/)
    assert.match(text, /bus bridge +redis 10\.0\.0\.5:6379, channel clusterize:bus \(connected\)/)
    assert.match(text, /probes +http:\/\/127\.0\.0\.1:9090/)
    assert.match(text, /^ +0 +101 +1 +ready +1s +0$/m)
    assert.match(text, /^ +1 +102 +1 +starting +1m30s +2$/m)
    assert.doesNotMatch(text, /\x1b\[/)
    assert.match(formatBanner(stats, { color: true }), /\x1b\[1m/)
  })

  test('without bus status the bridge comes from the option, password hidden', () => {
    const text = formatBanner(Object.assign({}, stats, { bus: undefined, workers: [] }), { redis: 'redis://user:secret@db:6379/0' })
    assert.match(text, /bus bridge +redis redis:\/\/user:\*\*\*@db:6379\/0/)
    assert.doesNotMatch(text, /secret/)
  })

  test('the JSON logger writes one object per line with time, level, pid, msg and fields', () => {
    const lines = []
    const logger = createJsonLogger({ write: (line) => lines.push(line) }, { role: 'primary' })
    logger.info({ port: 3000 }, 'listening')
    logger.warn({ pid: 4242, level: 'x' }, 'worker crashed')
    logger.error('plain message')
    assert.ok(lines.every((line) => line.endsWith('\n') && line.indexOf('\n') === line.length - 1))
    const [first, second, third] = lines.map((line) => JSON.parse(line))
    assert.strictEqual(first.level, 'info')
    assert.strictEqual(first.msg, 'listening')
    assert.strictEqual(first.port, 3000)
    assert.strictEqual(first.pid, process.pid)
    assert.strictEqual(first.role, 'primary')
    assert.ok(!Number.isNaN(Date.parse(first.time)))
    assert.strictEqual(second.pid, process.pid, 'pid is always the writer')
    assert.strictEqual(second.workerPid, 4242)
    assert.strictEqual(second.level, 'warn')
    assert.strictEqual(third.msg, 'plain message')
  })
})
