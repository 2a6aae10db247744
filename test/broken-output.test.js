'use strict'

/**
 * A log reader that goes away (a log shipper restarting) must not take the
 * service down: the CLI runs (with `--json`, or the default stderr logger)
 * with its stdout and stderr piped into a process that reads one line and
 * exits; the primary and its workers (whose app logs every request) then
 * write into a pipe nobody reads (EPIPE) through a reload, a worker's crash
 * and requests, keep serving, count the lines they dropped in /stats, and
 * still shut down cleanly.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { spawn } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { isAlive } = require('../lib/process-alive')
const { CLI_BIN, httpGet, cliScratch } = require('./helpers/cli')

// Logs a line to stdout on every request: the workers write into the broken pipe too.
const APP = path.join(__dirname, 'fixtures', 'logging-app.js')

const { tmp, tracked } = cliScratch('output')

/** Reads one line from its stdin, hands it to us, and exits: the read end of the pipe goes with it. */
const ONE_LINE_READER = "process.stdin.once('data', (d) => { process.stdout.write(d); process.exit(0) })"

const VARIANTS = [
  ['--json on stdout', ['--json'], /^\{.*"level"/],
  ['the default logger on stderr', [], /^\[clusterize/]
]

for (const [name, flags, firstLinePattern] of VARIANTS) {
  test(`${name}, its reader gone (EPIPE): the primary and its workers keep serving, count what they dropped, and stop with 0`, async () => {
    const port = await freePort()
    const probesPort = await freePort()
    const pidFile = path.join(tmp, 'app.pid')
    const reader = spawn(process.execPath, ['-e', ONE_LINE_READER], { stdio: ['pipe', 'pipe', 'inherit'] })
    tracked.add(reader.pid)
    let firstLine = ''
    reader.stdout.on('data', (chunk) => { firstLine += chunk })
    const readerExited = new Promise((resolve) => reader.once('exit', resolve))

    const cli = spawn(process.execPath, [CLI_BIN, APP, ...flags, '--workers', '2', '--bake-ms', '0', '--host', '127.0.0.1',
      '--port', String(port), '--probes-port', String(probesPort), '--pid-file', pidFile], {
      cwd: tmp,
      env: Object.assign({}, process.env, { PORT: '', WORKERS: '', REDIS_URL: '', NO_COLOR: '1' }),
      // The CLI's stdout and stderr are the reader's stdin; our copy of that pipe is closed below.
      stdio: ['ignore', reader.stdin, reader.stdin]
    })
    tracked.add(cli.pid)
    reader.stdin.destroy()
    const exited = new Promise((resolve) => cli.once('exit', (code, signal) => resolve({ code, signal })))
    let gone = null
    exited.then((how) => { gone = how })
    const what = (text) => () => `${text}; the CLI ${gone ? `exited (${JSON.stringify(gone)})` : 'runs'}`

    await readerExited
    assert.match(firstLine, firstLinePattern, 'the reader got a log line before it exited')

    const stats = async () => (await httpGet(probesPort, '/stats')).json
    await eventually(async () => {
      if (gone) throw new Error(what('the CLI exited')())
      const s = await stats().catch(() => null)
      return s !== null && s.workers.filter((w) => w.state === 'ready').length === 2
    }, { timeoutMs: 60000, intervalMs: 100, what: what('two ready workers') })

    // Logged into the broken pipe: a reload (primary and new workers) and a worker killed (its exit and restart).
    process.kill(cli.pid, 'SIGUSR2')
    await eventually(async () => (await stats()).reloads >= 1, { timeoutMs: 60000, intervalMs: 100, what: what('the reload to finish') })
    const before = await stats()
    process.kill(before.workers[0].pid, 'SIGKILL')
    await eventually(async () => {
      const s = await stats()
      return !s.workers.some((w) => w.pid === before.workers[0].pid) && s.workers.filter((w) => w.state === 'ready').length === 2
    }, { timeoutMs: 60000, intervalMs: 100, what: what('the killed worker to be replaced') })

    assert.strictEqual(gone, null, 'the primary is still running')
    const serving = await stats()
    // Every request makes a worker write to its stdout, the same broken pipe.
    for (let i = 0; i < 20; i++) assert.strictEqual((await httpGet(port, '/')).status, 200)
    const final = await eventually(async () => {
      const s = await stats()
      return s.workers.some((w) => w.heartbeat && w.heartbeat.logDropped > 0) && s
    }, { timeoutMs: 20000, intervalMs: 100, what: what('a worker counting the lines it dropped') })
    assert.deepStrictEqual(final.workers.map((w) => w.pid).sort(), serving.workers.map((w) => w.pid).sort(), 'no worker died writing to the broken pipe')
    assert.ok(final.output.dropped > 0, `the primary counted the lines it dropped: ${JSON.stringify(final.output)}`)

    process.kill(cli.pid, 'SIGTERM')
    assert.deepStrictEqual(await exited, { code: 0, signal: null }, what('a clean stop')())
    for (const worker of final.workers) {
      await eventually(() => !isAlive(worker.pid), { timeoutMs: 20000, what: `worker ${worker.pid} to be gone` })
    }
  })
}
