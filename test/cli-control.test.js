'use strict'

/**
 * The CLI primary's control socket: `clusterize reload` reports the reload's
 * own result through it (no probes needed), the socket is 0600 and goes away
 * with the primary, and without it reload falls back to the recorded signal.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawn, execFile } = require('child_process')
const fs = require('fs')
const net = require('net')
const os = require('os')
const path = require('path')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { isAlive } = require('../lib/process-alive')
const { sendControl } = require('../lib/cli/control-server')

const BIN = path.join(__dirname, '..', 'bin', 'clusterize.js')
const APP = path.join(__dirname, '..', 'examples', 'hello', 'app.js')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-ctl-'))
const started = []
let primary = null

after(() => {
  // Workers of a SIGKILLed primary exit on their own once its channel closes.
  for (const child of started) {
    if (isAlive(child.pid)) child.kill('SIGKILL')
  }
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** Start `clusterize APP` on loopback with its own pid file; `after` kills it if a test fails. */
function startPrimary (pidFile, port, args) {
  const child = spawn(process.execPath, [BIN, APP, ...args, '--port', String(port), '--host', '127.0.0.1', '--pid-file', pidFile], {
    cwd: tmp, env: Object.assign({}, process.env, { WORKERS: '', PORT: '', NO_COLOR: '1' }), stdio: 'ignore'
  })
  started.push(child)
  return child
}

function run (args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd: tmp, timeout: 90000, env: Object.assign({}, process.env, { NO_COLOR: '1' }) }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr })
    })
  })
}

test('clusterize reload answers with the result through the 0600 control socket; without it, the recorded signal', async () => {
  const pidFile = path.join(tmp, 'app.pid')
  const port = await freePort()
  primary = startPrimary(pidFile, port, ['--workers', '2', '--bake-ms', '0'])
  const info = await eventually(() => fs.existsSync(pidFile) && JSON.parse(fs.readFileSync(pidFile, 'utf8')), { timeoutMs: 30000, what: 'the pid file' })
  assert.strictEqual(info.controlSocket, pidFile + '.sock')
  assert.strictEqual(info.reloadSignal, 'SIGUSR2')
  const mode = fs.statSync(info.controlSocket).mode & 0o777
  assert.strictEqual(mode, 0o600, `socket mode ${mode.toString(8)}`)

  const first = await run(['reload', '--pid-file', pidFile])
  assert.strictEqual(first.code, 0, first.stderr)
  assert.match(first.stdout, /reload done: generation 2, 2 worker\(s\) replaced in \d+ ms/)
  const json = await run(['reload', '--pid-file', pidFile, '--json'])
  const result = JSON.parse(json.stdout)
  assert.strictEqual(result.ok, true)
  assert.strictEqual(result.generation, 3)

  const bad = await sendControl(info.controlSocket, { cmd: 'explode' }, 5000)
  assert.deepStrictEqual(bad, { ok: false, error: 'unknown cmd: use reload, upgrade, scale, status or stop' })

  // Without the socket file the CLI sends the recorded signal and follows /stats.
  fs.unlinkSync(info.controlSocket)
  const fallback = await run(['reload', '--pid-file', pidFile])
  assert.strictEqual(fallback.code, 0, fallback.stderr)
  assert.match(fallback.stdout, /reload done: generation 3 -> 4/)

  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
  await eventually(() => !isAlive(primary.pid), { timeoutMs: 30000, what: 'the primary to exit' })
  assert.ok(!fs.existsSync(pidFile))
})

test('a stale socket file from a dead primary is replaced, and removed on exit', async () => {
  const pidFile = path.join(tmp, 'stale.pid')
  // A socket file nobody listens on, as a killed primary leaves it (exit does not unlink it).
  const script = `require('net').createServer().listen(${JSON.stringify(pidFile + '.sock')}, () => process.exit(0))`
  await new Promise((resolve, reject) => execFile(process.execPath, ['-e', script], (err) => err ? reject(err) : resolve()))
  assert.ok(fs.statSync(pidFile + '.sock').isSocket(), 'the stale socket is there')
  const port = await freePort()
  primary = startPrimary(pidFile, port, ['--workers', '1'])
  const info = await eventually(() => fs.existsSync(pidFile) && JSON.parse(fs.readFileSync(pidFile, 'utf8')), { timeoutMs: 30000, what: 'the pid file' })
  assert.strictEqual(info.controlSocket, pidFile + '.sock')
  const status = await sendControl(info.controlSocket, { cmd: 'status' }, 5000)
  assert.strictEqual(status.result.workers.length, 1)
  const stopped = await sendControl(info.controlSocket, { cmd: 'stop' }, 5000)
  assert.deepStrictEqual(stopped, { ok: true })
  await new Promise((resolve) => primary.once('exit', resolve))
  assert.ok(!fs.existsSync(pidFile + '.sock'), 'the socket file is gone')
})

test('--reload-signal SIGHUP is recorded in the pid file and sent when there is no control socket', async () => {
  const pidFile = path.join(tmp, 'hup.pid')
  const port = await freePort()
  primary = startPrimary(pidFile, port, ['--workers', '2', '--reload-signal', 'SIGHUP', '--bake-ms', '0'])
  const info = await eventually(() => fs.existsSync(pidFile) && JSON.parse(fs.readFileSync(pidFile, 'utf8')), { timeoutMs: 30000, what: 'the pid file' })
  assert.strictEqual(info.reloadSignal, 'SIGHUP')
  // This primary has no SIGUSR2 handler: SIGUSR2 would kill it, SIGHUP reloads it.
  fs.unlinkSync(info.controlSocket)
  const fallback = await run(['reload', '--pid-file', pidFile])
  assert.strictEqual(fallback.code, 0, fallback.stderr)
  assert.match(fallback.stdout, /reload done: generation 1 -> 2/)
  assert.ok(isAlive(primary.pid), 'the primary is still running')

  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
  assert.ok(!fs.existsSync(pidFile))
})

test('with --workers 0 (no probes server) status answers through the socket; reload and scale say why they were skipped, exit 1', async () => {
  const pidFile = path.join(tmp, 'single.pid')
  const port = await freePort()
  primary = startPrimary(pidFile, port, ['--workers', '0'])
  const info = await eventually(() => fs.existsSync(pidFile) && JSON.parse(fs.readFileSync(pidFile, 'utf8')), { timeoutMs: 30000, what: 'the pid file' })
  assert.strictEqual(info.probesPort, null)
  const status = await run(['status', '--pid-file', pidFile])
  assert.strictEqual(status.code, 0, status.stderr)
  assert.match(status.stdout, new RegExp(`^primary ${primary.pid}: ready, port ${port}, scheduling single-process`))
  const json = await run(['status', '--pid-file', pidFile, '--json'])
  assert.strictEqual(JSON.parse(json.stdout).pid, primary.pid)
  const reload = await run(['reload', '--pid-file', pidFile])
  assert.strictEqual(reload.code, 1)
  assert.match(reload.stdout, /reload stopped: reload needs workers: single-process mode/)
  const scale = await run(['scale', '+1', '--pid-file', pidFile])
  assert.strictEqual(scale.code, 1)
  assert.match(scale.stderr, /scale needs workers: this primary runs in single-process mode \(--workers 0\); restart it with --workers N/)

  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
  assert.ok(!fs.existsSync(pidFile + '.sock'))
})

test('a reload that outlasts --timeout is reported, not requested a second time by signal', async () => {
  const pidFile = path.join(tmp, 'slow.pid')
  const port = await freePort()
  primary = startPrimary(pidFile, port, ['--workers', '2', '--bake-ms', '2000'])
  await eventually(() => fs.existsSync(pidFile), { timeoutMs: 30000, what: 'the pid file' })
  // A reload lasts at least reload.bakeMs (2 s here): 1 s runs out first.
  const slow = await run(['reload', '--pid-file', pidFile, '--timeout', '1'])
  assert.strictEqual(slow.code, 1, slow.stdout)
  assert.match(slow.stderr, /no answer within 1 s; it may still be running/)
  const stats = async () => JSON.parse((await run(['status', '--pid-file', pidFile, '--json'])).stdout)
  await eventually(async () => (await stats()).reloads >= 1, { timeoutMs: 60000, what: 'the first reload to finish' })
  // Had the CLI also sent the signal, a second reload would now be running or done.
  const next = await run(['reload', '--pid-file', pidFile, '--json'])
  assert.strictEqual(next.code, 0, next.stderr)
  assert.strictEqual(JSON.parse(next.stdout).generation, 3)
  assert.strictEqual((await stats()).reloads, 2)

  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
})

test('a file at the socket path that is not a socket is left alone: no socket, reload uses the signal', async () => {
  const pidFile = path.join(tmp, 'notsock.pid')
  fs.writeFileSync(pidFile + '.sock', 'somebody\'s data')
  const port = await freePort()
  primary = startPrimary(pidFile, port, ['--workers', '1', '--bake-ms', '0'])
  const info = await eventually(() => fs.existsSync(pidFile) && JSON.parse(fs.readFileSync(pidFile, 'utf8')), { timeoutMs: 30000, what: 'the pid file' })
  assert.strictEqual(info.controlSocket, null)
  assert.strictEqual(fs.readFileSync(pidFile + '.sock', 'utf8'), 'somebody\'s data')
  const reload = await run(['reload', '--pid-file', pidFile])
  assert.strictEqual(reload.code, 0, reload.stderr)
  assert.match(reload.stdout, /reload done: generation 1 -> 2/)

  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
  assert.strictEqual(fs.readFileSync(pidFile + '.sock', 'utf8'), 'somebody\'s data')
})

test('a client that shuts down its sending side after the command (socat, nc -N) still gets the reload result', async () => {
  const pidFile = path.join(tmp, 'half.pid')
  const port = await freePort()
  primary = startPrimary(pidFile, port, ['--workers', '1', '--bake-ms', '0'])
  const info = await eventually(() => fs.existsSync(pidFile) && JSON.parse(fs.readFileSync(pidFile, 'utf8')), { timeoutMs: 30000, what: 'the pid file' })
  const body = await new Promise((resolve, reject) => {
    let text = ''
    const socket = net.connect({ path: info.controlSocket, allowHalfOpen: true }, () => socket.end('{"cmd":"reload"}\n'))
    socket.setEncoding('utf8')
    socket.setTimeout(60000, () => socket.destroy(new Error('the server neither answered nor closed')))
    socket.on('data', (chunk) => { text += chunk })
    socket.on('end', () => resolve(text))
    socket.on('error', reject)
  })
  const reply = JSON.parse(body)
  assert.strictEqual(reply.ok, true)
  assert.strictEqual(reply.result.ok, true)
  assert.strictEqual(reply.result.generation, 2)

  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
})

test('a primary killed during `clusterize reload`: the CLI says it exited during the reload', async () => {
  const pidFile = path.join(tmp, 'killed.pid')
  const port = await freePort()
  // A long bake: the reload is still running when the primary is killed.
  primary = startPrimary(pidFile, port, ['--workers', '1', '--bake-ms', '60000'])
  const info = await eventually(() => fs.existsSync(pidFile) && JSON.parse(fs.readFileSync(pidFile, 'utf8')), { timeoutMs: 30000, what: 'the pid file' })
  const reloading = run(['reload', '--pid-file', pidFile])
  // The canary is up beside the old worker: the reload is under way.
  await eventually(async () => (await sendControl(info.controlSocket, { cmd: 'status' }, 5000)).result.workers.length === 2, { timeoutMs: 30000, what: 'the canary' })
  const statusBefore = await sendControl(info.controlSocket, { cmd: 'status' }, 5000)
  process.kill(primary.pid, 'SIGKILL')
  const result = await reloading
  assert.strictEqual(result.code, 1, result.stdout)
  assert.match(result.stderr, new RegExp(`primary ${primary.pid} exited during the reload \\(stopped by a signal, killed, or crashed\\) before it could answer`))
  assert.doesNotMatch(result.stderr, /not JSON/)
  // Its workers drain and exit by themselves once their primary is gone.
  for (const worker of statusBefore.result.workers) {
    await eventually(() => !isAlive(worker.pid), { timeoutMs: 30000, what: `worker ${worker.pid} to exit` })
  }
})

test('clusterize scale N, +N and -N add and retire workers live through the control socket; a bad count is refused', async () => {
  const pidFile = path.join(tmp, 'scale.pid')
  const port = await freePort()
  primary = startPrimary(pidFile, port, ['--workers', '1'])
  const info = await eventually(() => fs.existsSync(pidFile) && JSON.parse(fs.readFileSync(pidFile, 'utf8')), { timeoutMs: 30000, what: 'the pid file' })
  const workers = async () => (await sendControl(info.controlSocket, { cmd: 'status' }, 5000)).result.workers

  const up = await run(['scale', '3', '--pid-file', pidFile])
  assert.strictEqual(up.code, 0, up.stderr)
  assert.match(up.stdout, /scaled from 1 to 3 workers in \d+ ms/)
  assert.deepStrictEqual((await workers()).map((w) => [w.id, w.state]), [[0, 'ready'], [1, 'ready'], [2, 'ready']])

  const down = await run(['scale', '-2', '--pid-file', pidFile, '--json'])
  assert.strictEqual(down.code, 0, down.stderr)
  const result = JSON.parse(down.stdout)
  assert.strictEqual(result.ok, true)
  assert.strictEqual(result.from, 3)
  assert.strictEqual(result.to, 1)
  assert.deepStrictEqual((await workers()).map((w) => w.id), [0])

  const more = await run(['scale', '+1', '--pid-file', pidFile])
  assert.strictEqual(more.code, 0, more.stderr)
  assert.match(more.stdout, /scaled from 1 to 2 workers/)

  const zero = await run(['scale', '0', '--pid-file', pidFile])
  assert.strictEqual(zero.code, 2)
  assert.match(zero.stderr, /clusterize scale takes a count from 1 to 1024, got 0; to stop every worker use clusterize stop/)
  const tooFew = await run(['scale', '-5', '--pid-file', pidFile])
  assert.strictEqual(tooFew.code, 1)
  assert.match(tooFew.stderr, /the worker count must be an integer from 1 to 1024, got -3/)
  const bad = await sendControl(info.controlSocket, { cmd: 'scale', count: 2, delta: 1 }, 5000)
  assert.strictEqual(bad.ok, false)
  assert.match(bad.error, /send either "count"/)
  assert.strictEqual((await workers()).length, 2)

  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
})
