'use strict'

/**
 * The pid file as a root hazard: the CLI often runs as root, and what a pid
 * file says decides which process it signals. A planted symlink is never
 * followed; a pid file another user owns or may write, a signal clusterize
 * does not use, or a pid its control socket does not confirm as the primary (whatever answers
 * on the recorded probes port) is refused, and the
 * process it names (a `sleep` started here) survives. The default pid file
 * lives in a private directory.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawn, spawnSync } = require('child_process')
const fs = require('fs')
const http = require('http')
const net = require('net')
const os = require('os')
const path = require('path')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { isAlive } = require('../lib/process-alive')
const { CLI_BIN: BIN, HELLO_APP: APP, runCli, startCli } = require('./helpers/cli')
const { readPidFile, writePidFile, processIdentity } = require('../lib/cli/pid-file')
const { defaultPidFile, ensurePrivateDir } = require('../lib/cli/runtime-dir')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-pidfile-'))
const NOBODY = 65534
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0
const children = []
const servers = []

after(() => {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  }
  for (const server of servers) server.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

function run (args, options = {}) {
  return runCli(args, { cwd: options.cwd || tmp, env: options.env, timeoutMs: 60000 })
}

/** A process that must survive: SIGHUP, SIGTERM or SIGKILL would end it. */
function startVictim () {
  const victim = spawn('sleep', ['120'], { stdio: 'ignore' })
  children.push(victim)
  return victim
}

function assertAlive (victim, what) {
  assert.ok(victim.exitCode === null && victim.signalCode === null && isAlive(victim.pid), `${what}: the victim ${victim.pid} was signalled`)
}

function plantPidFile (name, info, mode) {
  const file = path.join(tmp, name)
  fs.writeFileSync(file, JSON.stringify(info))
  fs.chmodSync(file, mode || 0o644)
  return file
}

test('writePidFile does not follow a symlink planted at its temp path', () => {
  const dir = fs.mkdtempSync(path.join(tmp, 'w-'))
  const secret = path.join(dir, 'secret')
  fs.writeFileSync(secret, 'root only\n', { mode: 0o600 })
  const file = path.join(dir, 'app.pid')
  fs.symlinkSync(secret, `${file}.${process.pid}.tmp`)
  const missing = path.join(dir, 'created-through-a-dangling-link')
  const other = path.join(dir, 'other.pid')
  fs.symlinkSync(missing, `${other}.${process.pid}.tmp`)

  writePidFile(file, { pid: 4242 })
  writePidFile(other, { pid: 4343 })

  assert.strictEqual(fs.readFileSync(secret, 'utf8'), 'root only\n', 'the symlink target is untouched')
  assert.ok(!fs.existsSync(missing), 'nothing is created through a dangling symlink')
  assert.ok(fs.lstatSync(`${file}.${process.pid}.tmp`).isSymbolicLink(), 'the planted link is left as it was')
  assert.strictEqual(readPidFile(file).pid, 4242)
  assert.strictEqual(readPidFile(other).pid, 4343)
  assert.ok(fs.lstatSync(file).isFile())
  assert.deepStrictEqual(fs.readdirSync(dir).filter((name) => name.endsWith('.tmp') && !fs.lstatSync(path.join(dir, name)).isSymbolicLink()), [], 'no temp file left behind')
})

test('a pid file another user owns or may write, or that is a symlink, is refused and its pid is not signalled', { skip: !isRoot && 'chown to another user needs root' }, async () => {
  const victim = startVictim()
  const hostile = { pid: victim.pid, reloadSignal: 'SIGHUP', script: 'sleep' }
  const owned = plantPidFile('nobody.pid', hostile)
  fs.chownSync(owned, NOBODY, NOBODY)
  const writable = plantPidFile('writable.pid', hostile, 0o666)
  const groupWritable = plantPidFile('group.pid', hostile, 0o664)
  const link = path.join(tmp, 'link.pid')
  fs.symlinkSync(plantPidFile('target.pid', hostile), link)

  const cases = [
    [owned, /refusing pid file .*nobody\.pid: it belongs to another user \(uid 65534\)/],
    [writable, /refusing pid file .*writable\.pid: other users may write to it \(mode 666\)/],
    [groupWritable, /refusing pid file .*group\.pid: other users may write to it \(mode 664\)/],
    [link, /refusing pid file .*link\.pid: it is a symlink/]
  ]
  for (const [file, message] of cases) {
    for (const command of ['reload', 'stop', 'status']) {
      const result = await run([command, '--pid-file', file])
      assert.strictEqual(result.code, 1, `${command} ${file}: ${result.stdout}${result.stderr}`)
      assert.match(result.stderr, message, command)
      assertAlive(victim, `${command} ${path.basename(file)}`)
    }
  }
  // A start refuses to take over such a file too (and forks nothing).
  const start = await run([APP, '--workers', '1', '--port', '0', '--pid-file', owned])
  assert.strictEqual(start.code, 2, start.stderr)
  assert.match(start.stderr, /belongs to another user.*choose another --pid-file/)
  assert.strictEqual(fs.statSync(owned).uid, NOBODY, 'the file is left alone')
})

test('a reload signal clusterize does not use is refused with a clear error, even in your own pid file', async () => {
  const victim = startVictim()
  for (const reloadSignal of ['SIGKILL', 'SIGTERM', 'SIGSTOP', 'KILL', 9]) {
    const file = plantPidFile('signal.pid', { pid: victim.pid, reloadSignal, script: 'sleep' })
    const result = await run(['reload', '--pid-file', file])
    assert.strictEqual(result.code, 1)
    assert.match(result.stderr, new RegExp(`reload signal ${JSON.stringify(JSON.stringify(reloadSignal)).slice(1, -1)} is not one clusterize uses \\(SIGUSR2, SIGHUP, SIGUSR1\\)`), String(reloadSignal))
    assertAlive(victim, String(reloadSignal))
  }
  assert.throws(() => require('../lib/config').resolveConfig({ reload: { signal: 'SIGKILL' } }, {}),
    (err) => err.option === 'reload.signal' && /one of 'SIGUSR2', 'SIGHUP', 'SIGUSR1', or false/.test(err.message))
})

test('a well-owned pid file naming a process that is not a clusterize primary: nothing is signalled', async () => {
  const victim = startVictim()
  const bare = plantPidFile('bare.pid', { pid: victim.pid, reloadSignal: 'SIGHUP', script: 'sleep' })

  // A control socket and a probes server that answer, but for another pid.
  const socketPath = path.join(tmp, 'liar.sock')
  const liar = net.createServer((socket) => socket.end(JSON.stringify({ ok: true, result: { pid: 1 } }) + '\n'))
  servers.push(liar)
  await new Promise((resolve) => liar.listen(socketPath, resolve))
  const probes = http.createServer((req, res) => res.end(JSON.stringify({ pid: 1, reloads: 0, generation: 1, workers: [] })))
  servers.push(probes)
  await new Promise((resolve) => probes.listen(0, '127.0.0.1', resolve))
  // Whoever took the recorded probes port once the primary was gone may answer with its pid: no proof.
  const impostor = http.createServer((req, res) => res.end(JSON.stringify({ pid: victim.pid, reloads: 0, generation: 1, workers: [] })))
  servers.push(impostor)
  await new Promise((resolve) => impostor.listen(0, '127.0.0.1', resolve))
  const stale = path.join(tmp, 'stale.sock')
  // A socket file nobody listens on, as a primary killed with SIGKILL leaves it.
  spawnSync(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(stale)}, () => process.kill(process.pid, 'SIGKILL'))`])
  assert.ok(fs.lstatSync(stale).isSocket())
  const viaSocket = plantPidFile('socket.pid', { pid: victim.pid, reloadSignal: 'SIGHUP', script: 'sleep', controlSocket: path.join(tmp, 'gone.sock'), probesPort: null })
  const viaLiar = plantPidFile('liar.pid', { pid: victim.pid, reloadSignal: 'SIGHUP', script: 'sleep', controlSocket: socketPath })
  const viaProbes = plantPidFile('probes.pid', { pid: victim.pid, reloadSignal: 'SIGHUP', script: 'sleep', probesPort: probes.address().port, probesHost: '127.0.0.1' })
  const viaImpostor = plantPidFile('impostor.pid', { pid: victim.pid, reloadSignal: 'SIGHUP', script: 'sleep', controlSocket: stale, probesPort: impostor.address().port, probesHost: '127.0.0.1' })

  // The victim's pid, but not the process that wrote the file: the pid was reused.
  const identity = processIdentity(victim.pid)
  const reused = plantPidFile('reused.pid', { pid: victim.pid, reloadSignal: 'SIGHUP', script: 'sleep', controlSocket: stale, startTime: String(Number(identity.startTime) - 1), bootId: identity.bootId })

  const cases = [
    [bare, /the pid file records no control socket, and the pid file records no process start time/],
    [viaSocket, /its control socket .*gone\.sock is gone/],
    [viaProbes, /the pid file records no control socket/],
    [viaImpostor, /its control socket .*stale\.sock does not answer \(ECONNREFUSED\), and the pid file records no process start time/],
    [reused, new RegExp(`pid ${victim.pid} started at another time than the primary that wrote the pid file \\(its pid was reused\\)`)]
  ]
  for (const [file, why] of cases) {
    for (const command of ['reload', 'stop']) {
      const result = await run([command, '--pid-file', file])
      assert.strictEqual(result.code, 1, `${command} ${file}: ${result.stdout}`)
      assert.match(result.stderr, new RegExp(`not signalling pid ${victim.pid}: it is not confirmed to be the clusterize primary`), command)
      assert.match(result.stderr, why, `${command} ${path.basename(file)}`)
      assert.match(result.stderr, new RegExp(`signal it yourself after checking \`ps -p ${victim.pid} -o args\``), command)
      assertAlive(victim, `${command} ${path.basename(file)}`)
    }
  }
  // The lying socket cannot reload anything either: its reply is no reload result.
  const stop = await run(['stop', '--pid-file', viaLiar])
  assert.strictEqual(stop.code, 1)
  assert.match(stop.stderr, /its control socket answers for pid 1/)
  assertAlive(victim, 'stop through a lying socket')
})

test('the default pid file and control socket live in a private runtime directory, found again from the same directory', async () => {
  const runtime = fs.mkdtempSync(path.join(tmp, 'xdg-'))
  fs.chmodSync(runtime, 0o700)
  const cwd = fs.mkdtempSync(path.join(tmp, 'project-'))
  const env = { XDG_RUNTIME_DIR: runtime }
  const port = await freePort()
  const primary = spawn(process.execPath, [BIN, APP, '--workers', '1', '--port', String(port), '--host', '127.0.0.1'], {
    cwd, env: Object.assign({}, process.env, env, { WORKERS: '', PORT: '', REDIS_URL: '', NO_COLOR: '1' }), stdio: 'ignore'
  })
  children.push(primary)
  const file = defaultPidFile(env, cwd)
  assert.strictEqual(path.dirname(file), path.join(runtime, 'clusterize'))
  const info = await eventually(() => fs.existsSync(file) && readPidFile(file), { timeoutMs: 30000, what: 'the default pid file' })
  assert.strictEqual(info.pid, primary.pid)
  assert.strictEqual(info.controlSocket, file + '.sock')
  assert.strictEqual(fs.statSync(path.dirname(file)).mode & 0o777, 0o700)
  assert.ok(!fs.existsSync(path.join(cwd, 'clusterize.pid')), 'nothing in the working directory')

  const status = await run(['status', '--json'], { cwd, env })
  assert.strictEqual(status.code, 0, status.stderr)
  assert.strictEqual(JSON.parse(status.stdout).pid, primary.pid)
  const elsewhere = await run(['status'], { cwd: tmp, env })
  assert.strictEqual(elsewhere.code, 1)
  assert.match(elsewhere.stderr, /no pid file at .*is clusterize running from this directory/)
  const stop = await run(['stop'], { cwd, env })
  assert.strictEqual(stop.code, 0, stop.stderr)
  assert.ok(!fs.existsSync(file) && !fs.existsSync(file + '.sock'))
})

test('without a usable XDG_RUNTIME_DIR the default is a 0700 directory of this user under the temp dir; a squatted one is refused', { skip: !isRoot && 'chown to another user needs root' }, () => {
  const uid = process.getuid()
  assert.strictEqual(path.dirname(defaultPidFile({}, '/srv/app')), path.join(os.tmpdir(), `clusterize-${uid}`))
  const open = fs.mkdtempSync(path.join(tmp, 'open-xdg-'))
  fs.chmodSync(open, 0o777)
  assert.strictEqual(path.dirname(defaultPidFile({ XDG_RUNTIME_DIR: open }, '/srv/app')), path.join(os.tmpdir(), `clusterize-${uid}`), 'a world-writable XDG_RUNTIME_DIR is ignored')
  assert.notStrictEqual(defaultPidFile({}, '/srv/a'), defaultPidFile({}, '/srv/b'), 'one file per working directory')

  const squatted = path.join(tmp, 'squatted')
  fs.mkdirSync(squatted, { mode: 0o700 })
  fs.chownSync(squatted, NOBODY, NOBODY)
  assert.throws(() => ensurePrivateDir(squatted), /is not a directory that only this user can write to/)
  const linked = path.join(tmp, 'linked')
  fs.symlinkSync(fs.mkdtempSync(path.join(tmp, 'real-')), linked)
  assert.throws(() => ensurePrivateDir(linked), /is not a directory that only this user can write to/)
  const wide = path.join(tmp, 'wide')
  fs.mkdirSync(wide)
  fs.chmodSync(wide, 0o777)
  assert.throws(() => writePidFile(path.join(wide, 'app.pid'), { pid: 1 }), /writable by other users \(mode 777\) without the sticky bit/)
  fs.chmodSync(wide, 0o1777)
  writePidFile(path.join(wide, 'app.pid'), { pid: 1 })
  assert.strictEqual(readPidFile(path.join(wide, 'app.pid')).pid, 1, 'a sticky shared directory (like /tmp) is fine')
})

test('a <tmp>/clusterize-<uid> another user created first is no denial of service: the start uses ~/.clusterize/run and says so; status and stop find it there', { skip: !isRoot && 'chown to another user needs root' }, async () => {
  const tmpdir = fs.mkdtempSync(path.join(tmp, 'shared-tmp-'))
  fs.chmodSync(tmpdir, 0o1777)
  const home = fs.mkdtempSync(path.join(tmp, 'home-'))
  fs.chmodSync(home, 0o700)
  const squatted = path.join(tmpdir, `clusterize-${process.getuid()}`)
  fs.mkdirSync(squatted, { mode: 0o700 })
  fs.chownSync(squatted, NOBODY, NOBODY)
  const cwd = fs.mkdtempSync(path.join(tmp, 'project-'))
  const env = { TMPDIR: tmpdir, HOME: home, XDG_RUNTIME_DIR: '' }
  const pidFile = path.join(home, '.clusterize', 'run', path.basename(defaultPidFile({}, cwd)))
  const tracked = new Set()
  const port = await freePort()
  const primary = await startCli([APP, '--workers', '1', '--port', String(port), '--host', '127.0.0.1'], { cwd, env, pidFile, tracked })
  children.push(primary.child)
  assert.ok(primary.output.includes(`${squatted} is not a directory only you can write to (it belongs to uid ${NOBODY}): the pid file and control socket are in ${path.dirname(pidFile)} instead`), primary.output)
  assert.strictEqual(fs.statSync(path.dirname(pidFile)).mode & 0o777, 0o700)
  assert.deepStrictEqual(fs.readdirSync(squatted), [], 'nothing was written into the squatted directory')
  const status = await run(['status', '--json'], { cwd, env })
  assert.strictEqual(status.code, 0, status.stderr)
  assert.strictEqual(JSON.parse(status.stdout).pid, primary.child.pid)
  const stop = await run(['stop'], { cwd, env })
  assert.strictEqual(stop.code, 0, stop.stderr)
  assert.ok(!fs.existsSync(pidFile))
})
