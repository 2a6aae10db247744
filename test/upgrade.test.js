'use strict'

/**
 * `clusterize upgrade`: a new primary, started from what is on disk, takes
 * the listening sockets, the pid file, the control socket and the cluster
 * store's sessions; the old one drains and exits. If the new one cannot
 * start, the old one keeps serving and the result says why. Real CLI
 * primaries on loopback; every process a test starts (both primaries and
 * their workers) is killed by PID at the end.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawn, execFile, execFileSync } = require('child_process')
const fs = require('fs')
const http = require('http')
const os = require('os')
const path = require('path')
const { freePort, waitForPort, tcpMigrateReq } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { startLoad } = require('./helpers/load')
const { request } = require('./helpers/cluster')
const { isAlive } = require('../lib/process-alive')
const { sendControl } = require('../lib/cli/control-server')
const { parse } = require('./helpers/prometheus')

const BIN = path.join(__dirname, '..', 'bin', 'clusterize.js')
const APP = path.join(__dirname, 'fixtures', 'upgrade-app.js')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-upgrade-'))
/** Every pid a test saw: primaries and workers. */
const pids = new Set()
const outputs = []

after(async () => {
  for (const pid of pids) {
    if (isAlive(pid)) {
      try { process.kill(pid, 'SIGKILL') } catch {}
    }
  }
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** `clusterize APP` on loopback with its own pid file, output kept for failure messages. */
function startPrimary (name, port, args, env) {
  const pidFile = path.join(tmp, name + '.pid')
  const child = spawn(process.execPath, [BIN, APP, '--port', String(port), '--host', '127.0.0.1', '--pid-file', pidFile, ...args], {
    cwd: tmp,
    env: Object.assign({}, process.env, { WORKERS: '', PORT: '', NO_COLOR: '1' }, env),
    stdio: ['ignore', 'pipe', 'pipe']
  })
  pids.add(child.pid)
  const out = { text: '' }
  outputs.push(out)
  child.stdout.on('data', (chunk) => { out.text += chunk })
  child.stderr.on('data', (chunk) => { out.text += chunk })
  return { child, pidFile, out }
}

async function primaryInfo (pidFile, notPid) {
  const info = await eventually(() => {
    try {
      const info = JSON.parse(fs.readFileSync(pidFile, 'utf8'))
      return info.pid !== notPid ? info : null
    } catch {
      return null
    }
  }, { timeoutMs: 30000, what: 'the pid file' })
  pids.add(info.pid)
  return info
}

function run (args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd: tmp, timeout: 120000, env: Object.assign({}, process.env, { NO_COLOR: '1' }) }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr })
    })
  })
}

/** One request after another, each on a new connection, until stop(). */
function newConnectionLoad (port) {
  const results = { ok: 0, failures: [], primaries: new Set() }
  let stopped = false
  const done = (async () => {
    while (!stopped) {
      try {
        const res = await request(port, '/')
        if (res.status === 200) {
          results.ok++
          results.primaries.add(res.json.primary)
          pids.add(res.json.pid)
        } else {
          results.failures.push(`HTTP ${res.status}`)
        }
      } catch (err) {
        results.failures.push(err.code || err.message)
      }
    }
    return results
  })()
  return { results, stop () { stopped = true; return done } }
}

/**
 * Stop both loads and assert neither lost a request; the workers that served the kept-alive
 * connections join the pids killed at the end.
 * @returns {Promise<{ freshResults: object, keepAliveResults: object }>}
 */
async function stopLoadsLosingNothing (fresh, keepAlive) {
  const [freshResults, keepAliveResults] = await Promise.all([fresh.stop(), keepAlive.stop()])
  assert.deepStrictEqual(freshResults.failures, [], 'new-connection load')
  assert.deepStrictEqual(keepAliveResults.failures, [], 'keep-alive load')
  for (const pid of keepAliveResults.pids.keys()) pids.add(pid)
  return { freshResults, keepAliveResults }
}

function get (port, urlPath, headers, agent) {
  return request(port, urlPath, { headers, agent }).then((res) => {
    if (res.json && res.json.pid) pids.add(res.json.pid)
    return res
  })
}

test('clusterize upgrade under new-connection and keep-alive load, with 2 s requests in flight: 0 failed, a new primary owns the pid file and the control socket, the old one is gone', async () => {
  const port = await freePort()
  const { child, pidFile, out } = startPrimary('load', port, ['--workers', '2'])
  const before = await primaryInfo(pidFile)
  assert.strictEqual(before.pid, child.pid)

  const fresh = newConnectionLoad(port)
  const keepAlive = startLoad({ port, connections: 4, durationMs: 120000, paceMs: 2 })
  await keepAlive.served(50)
  // Slow requests on old workers: they must finish while those drain.
  const slow = Array.from({ length: 4 }, () => get(port, '/slow'))
  await eventually(async () => {
    const stats = JSON.parse((await run(['status', '--pid-file', pidFile, '--json'])).stdout)
    return stats.workers.reduce((sum, w) => sum + ((w.heartbeat && w.heartbeat.inFlight) || 0), 0) >= 4
  }, { timeoutMs: 20000, what: 'the slow requests in flight' })

  const upgrade = await run(['upgrade', '--pid-file', pidFile])
  assert.strictEqual(upgrade.code, 0, upgrade.stderr + out.text)
  assert.match(upgrade.stdout, new RegExp(`upgrade done: primary ${before.pid} -> \\d+`))
  const after = await primaryInfo(pidFile, before.pid)
  assert.notStrictEqual(after.pid, before.pid)
  assert.strictEqual(after.controlSocket, before.controlSocket)
  assert.strictEqual(after.port, port)

  // Served by the new primary's workers, over new and kept-alive connections alike.
  await eventually(() => fresh.results.primaries.has(after.pid), { timeoutMs: 20000, what: 'a response from the new primary\'s workers' })
  const slowResults = await Promise.all(slow)
  assert.deepStrictEqual(slowResults.map((r) => r.status), [200, 200, 200, 200])
  assert.ok(slowResults.every((r) => r.json.primary === before.pid), 'the slow requests were served by the old workers')
  await eventually(() => !isAlive(before.pid), { timeoutMs: 30000, what: `the old primary ${before.pid} to exit\n${out.text}` })
  const exit = await new Promise((resolve) => child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', resolve))
  assert.strictEqual(exit, 0, out.text)
  await keepAlive.served(50)
  const { keepAliveResults } = await stopLoadsLosingNothing(fresh, keepAlive)
  assert.strictEqual(keepAliveResults.failed, 0)

  const status = await run(['status', '--pid-file', pidFile])
  assert.strictEqual(status.code, 0, status.stderr)
  assert.match(status.stdout, new RegExp(`^primary ${after.pid}: ready, port ${port}`))
  // The probes socket moved too: the new primary's dashboard timeline starts with the upgrade.
  assert.strictEqual(after.probesPort, before.probesPort)
  const history = await request(after.probesPort, '/dashboard/history')
  const upgraded = JSON.parse(history.body).events.find((e) => e.type === 'upgrade-done')
  assert.deepStrictEqual([upgraded.ok, upgraded.pid, upgraded.previousPid], [true, after.pid, before.pid], history.body)
  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
  assert.ok(!fs.existsSync(pidFile), 'the new primary removes the pid file when it stops')
  assert.ok(!fs.existsSync(after.controlSocket), 'and its control socket')
})

test('a new primary that cannot start is killed and the old one keeps serving, with 0 failed requests; the result names the cause', async () => {
  const port = await freePort()
  const breakFile = path.join(tmp, 'broken')
  const { pidFile, out } = startPrimary('fail', port, ['--workers', '1'], { UPGRADE_BREAK_FILE: breakFile })
  const before = await primaryInfo(pidFile)
  const fresh = newConnectionLoad(port)
  const keepAlive = startLoad({ port, connections: 2, durationMs: 120000, paceMs: 2 })
  await keepAlive.served(20)

  // Options the new primary refuses (appended to the old ones, as at a first start).
  const badOptions = await run(['upgrade', '--pid-file', pidFile, '--', '--scheduling', 'fastest'])
  assert.strictEqual(badOptions.code, 1, badOptions.stderr)
  assert.match(badOptions.stdout, /upgrade failed: the new primary could not start: --scheduling must be one of/)
  assert.match(badOptions.stdout, new RegExp(`primary ${before.pid} keeps serving`))

  const otherPort = await run(['upgrade', '--pid-file', pidFile, '--', '--port', String(await freePort())])
  assert.strictEqual(otherPort.code, 1)
  assert.match(otherPort.stdout, /option "port" \(\d+\) differs from the port the upgraded primary serves/)

  // The app on disk is broken: the new primary's workers cannot load it.
  fs.writeFileSync(breakFile, 'a syntax error in the new release')
  const brokenApp = await run(['upgrade', '--pid-file', pidFile, '--json'])
  assert.strictEqual(brokenApp.code, 1, brokenApp.stderr)
  const result = JSON.parse(brokenApp.stdout)
  assert.strictEqual(result.ok, false)
  assert.match(result.reason, /a syntax error in the new release/)
  fs.unlinkSync(breakFile)

  // A node binary that does not exist.
  const noNode = await run(['upgrade', '--pid-file', pidFile, '--node', path.join(tmp, 'no-such-node')])
  assert.strictEqual(noNode.code, 1)
  assert.match(noNode.stdout, /upgrade failed: cannot start .*no-such-node: spawn .* ENOENT/)

  await keepAlive.served(20)
  const { freshResults } = await stopLoadsLosingNothing(fresh, keepAlive)
  assert.deepStrictEqual([...freshResults.primaries], [before.pid], 'only the old primary served')
  const info = JSON.parse(fs.readFileSync(pidFile, 'utf8'))
  assert.strictEqual(info.pid, before.pid, 'the pid file still names the old primary')
  const status = await run(['status', '--pid-file', pidFile])
  assert.match(status.stdout, new RegExp(`^primary ${before.pid}: ready`), status.stderr + out.text)
  // It can still be upgraded once the code on disk is fixed.
  const fixed = await run(['upgrade', '--pid-file', pidFile])
  assert.strictEqual(fixed.code, 0, fixed.stdout + fixed.stderr + out.text)
  const next = await primaryInfo(pidFile, before.pid)
  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
  assert.ok(!isAlive(next.pid))
})

/** A 2-worker primary with the cluster store, and ada logged in on it: her session's cookie. */
async function sessionsPrimaryWithLogin () {
  const port = await freePort()
  const { pidFile } = startPrimary('sessions', port, ['--workers', '2', '--sessions', 'cluster'])
  const before = await primaryInfo(pidFile)
  const login = await request(port, '/login?user=ada', { method: 'POST' })
  assert.strictEqual(login.status, 200)
  return { port, pidFile, before, cookie: login.headers['set-cookie'][0].split(';')[0] }
}

test('a session in the cluster store is still logged in after the upgrade', async () => {
  const { port, pidFile, before, cookie } = await sessionsPrimaryWithLogin()
  const me = await get(port, '/me', { cookie })
  assert.deepStrictEqual([me.status, me.json.user, me.json.primary], [200, 'ada', before.pid])

  const upgrade = await run(['upgrade', '--pid-file', pidFile])
  assert.strictEqual(upgrade.code, 0, upgrade.stdout + upgrade.stderr)
  const after = await primaryInfo(pidFile, before.pid)
  await eventually(() => !isAlive(before.pid), { timeoutMs: 30000, what: 'the old primary to exit' })
  const again = await get(port, '/me', { cookie })
  assert.deepStrictEqual([again.status, again.json.user, again.json.primary], [200, 'ada', after.pid])
  const stranger = await get(port, '/me')
  assert.strictEqual(stranger.status, 401, 'and a client without the cookie is not')
  await run(['stop', '--pid-file', pidFile])
})

test('every save answered during an upgrade is seen by the next request, on either primary (read leases on, kept-alive and new connections)', async () => {
  const { port, pidFile, before, cookie } = await sessionsPrimaryWithLogin()
  const headers = { cookie }
  // One request after another: mostly on a kept-alive connection (whose worker holds the session's
  // lease and answers its saves once written), every fourth on a new one (another worker, then the new primary).
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const counted = { answered: 0, failures: [], primaries: new Set() }
  let stopped = false
  const counting = (async () => {
    let visits = 0
    for (let i = 0; !stopped; i++) {
      try {
        const res = await get(port, '/count', headers, i % 4 === 3 ? false : agent)
        if (res.status !== 200) {
          counted.failures.push(`request ${i}: HTTP ${res.status}`)
          continue
        }
        counted.answered++
        counted.primaries.add(res.json.primary)
        if (res.json.visits !== visits + 1) counted.failures.push(`request ${i} (${res.json.primary === before.pid ? 'old' : 'new'} primary ${res.json.primary}, ${i % 4 === 3 ? 'new' : 'kept-alive'} connection): visits ${res.json.visits}, after ${visits}`)
        visits = res.json.visits
      } catch (err) {
        counted.failures.push(`request ${i}: ${err.code || err.message}`)
      }
    }
  })()
  try {
    await eventually(() => counted.answered >= 30, { timeoutMs: 30000, what: '30 counted requests' })
    const upgrade = await run(['upgrade', '--pid-file', pidFile])
    assert.strictEqual(upgrade.code, 0, upgrade.stdout + upgrade.stderr)
    const after = await primaryInfo(pidFile, before.pid)
    await eventually(() => !isAlive(before.pid), { timeoutMs: 30000, what: 'the old primary to exit' })
    const answeredThen = counted.answered
    await eventually(() => counted.answered >= answeredThen + 30, { timeoutMs: 30000, what: '30 more counted requests' })
    stopped = true
    await counting
    assert.deepStrictEqual(counted.failures, [])
    assert.ok(counted.primaries.has(before.pid) && counted.primaries.has(after.pid), `served by both primaries: ${[...counted.primaries]}`)
  } finally {
    stopped = true
    await counting
    agent.destroy()
    await run(['stop', '--pid-file', pidFile])
  }
})

/**
 * The singleton's lines in order of writing: every new holder starts after each earlier one
 * stopped (by file order, not by time), with a larger token. Returns the holders' [pid, token].
 */
function checkOneHolder (text) {
  const holders = []
  const running = new Map()
  for (const line of text.split('\n')) {
    const [event, pid, token] = line.split(' ')
    if (event === 'start') {
      assert.deepStrictEqual([...running.keys()], [], `${line} while ${[...running.values()].join(', ')} still runs:\n${text}`)
      if (holders.length > 0) assert.ok(Number(token) > holders[holders.length - 1][1], `token ${token} after ${holders[holders.length - 1][1]}`)
      running.set(token, `pid ${pid} (token ${token})`)
      holders.push([Number(pid), Number(token)])
    } else if (event === 'stop') {
      running.delete(token)
    }
  }
  return holders
}

test('the state the primary holds crosses the upgrade: limit 100 admits 100 across both primaries, one singleton holder at a time, each cron fire once, no app counter goes down', async () => {
  const port = await freePort()
  const ticks = path.join(tmp, 'state-ticks.txt')
  const { pidFile, out } = startPrimary('state', port, ['--workers', '2'], { UPGRADE_STATE_FILE: ticks })
  const before = await primaryInfo(pidFile)
  const limited = { admitted: 0, refused: 0, refusedByNew: 0, failures: [] }
  async function hit () {
    try {
      const res = await get(port, '/limited')
      if (res.status === 200) limited.admitted++
      else if (res.status === 429) {
        limited.refused++
        if (res.json.primary !== before.pid) limited.refusedByNew++
      } else limited.failures.push(`HTTP ${res.status} ${res.body}`)
    } catch (err) {
      limited.failures.push(err.code || err.message)
    }
  }
  async function scrape () {
    const res = await request(before.probesPort, '/metrics')
    assert.strictEqual(res.status, 200, res.body)
    return parse(res.body)
  }
  for (let i = 0; i < 60; i++) await hit()
  await eventually(() => fs.existsSync(ticks) && /^start /m.test(fs.readFileSync(ticks, 'utf8')), { timeoutMs: 20000, what: 'the singleton to start' })
  const counted = await scrape()
  let stopped = false
  const hitting = (async () => { while (!stopped) await hit() })()
  try {
    const upgrade = await run(['upgrade', '--pid-file', pidFile])
    assert.strictEqual(upgrade.code, 0, upgrade.stdout + upgrade.stderr + out.text)
    const after = await primaryInfo(pidFile, before.pid)
    await eventually(() => !isAlive(before.pid), { timeoutMs: 30000, what: 'the old primary to exit' })
    await eventually(() => limited.refusedByNew >= 5, { timeoutMs: 30000, what: () => `5 requests refused by the new primary's workers: ${JSON.stringify(limited)}` })
    stopped = true
    await hitting
    assert.deepStrictEqual(limited.failures, [])
    assert.strictEqual(limited.admitted, 100, `admitted across both primaries: ${JSON.stringify(limited)}`)

    // A new worker holds the singleton once the old holder stopped, never while it runs.
    await eventually(() => (fs.readFileSync(ticks, 'utf8').match(/^start /mg) || []).length >= 2, { timeoutMs: 30000, what: () => 'a holder on the new primary:\n' + fs.readFileSync(ticks, 'utf8') })
    const holders = checkOneHolder(fs.readFileSync(ticks, 'utf8'))
    assert.ok(holders.some(([pid]) => isAlive(pid)), 'a live worker of the new primary holds it')
    // node-cron's distributed task: each fire once, on either generation (a fire a second: wait for a
    // second one, since a loaded box can finish the upgrade within one).
    const cronFires = () => fs.readFileSync(ticks, 'utf8').split('\n').filter((line) => line.startsWith('cron ')).map((line) => line.split(' ')[2])
    await eventually(() => cronFires().length >= 2, { timeoutMs: 20000, what: () => 'two cron fires:\n' + fs.readFileSync(ticks, 'utf8') })
    const fires = cronFires()
    assert.strictEqual(fires.length, new Set(fires).size, `a fire ran twice: ${fires.join(', ')}`)

    const now = await scrape()
    for (const series of ['app_requests_total', 'app_request_size_count', 'app_request_size_sum', 'process_cpu_seconds_total']) {
      assert.ok(counted.has(series), `${series} scraped before`)
      assert.ok(now.get(series) >= counted.get(series), `${series} went down through the upgrade: ${counted.get(series)} -> ${now.get(series)}`)
    }
    assert.ok(after.pid !== before.pid)
  } finally {
    stopped = true
    await hitting
    await run(['stop', '--pid-file', pidFile])
  }
})

/** The node binary of `pkg` (node@24...) through npx: CI installs Node 24 (.ci/run); a missing one fails the test. */
function nodeBinary (pkg) {
  return execFileSync('npx', ['-y', pkg, '-e', 'process.stdout.write(process.execPath)'], { encoding: 'utf8', timeout: 180000, stdio: ['ignore', 'pipe', 'ignore'] }).trim()
}

test('clusterize upgrade --node moves the cluster to another Node version', async () => {
  const other = process.versions.node.startsWith('24.') ? 'node@22' : 'node@24'
  const otherNode = nodeBinary(other)
  const otherVersion = execFileSync(otherNode, ['--version'], { encoding: 'utf8' }).trim()
  assert.notStrictEqual(otherVersion, process.version)
  const port = await freePort()
  const { pidFile } = startPrimary('node', port, ['--workers', '1'])
  const before = await primaryInfo(pidFile)
  assert.strictEqual((await get(port, '/version')).json.version, process.version)
  const upgrade = await run(['upgrade', '--pid-file', pidFile, '--node', otherNode, '--json'])
  assert.strictEqual(upgrade.code, 0, upgrade.stdout + upgrade.stderr)
  assert.strictEqual(JSON.parse(upgrade.stdout).node, otherVersion)
  const after = await primaryInfo(pidFile, before.pid)
  const version = await get(port, '/version')
  assert.deepStrictEqual([version.json.version, version.json.primary], [otherVersion, after.pid])
  await run(['stop', '--pid-file', pidFile])
})

for (const scheduling of ['sticky', 'none']) {
  test(`systemd socket activation (${scheduling}): serves on the passed socket, then reloads and upgrades with no failed request`, async () => {
    const port = await freePort()
    const pidFile = path.join(tmp, `activated-${scheduling}.pid`)
    // systemd-socket-activate (Debian's systemd package) binds, then execs the primary with LISTEN_FDS on the first connection.
    const mainPidFile = path.join(tmp, `activated-${scheduling}.main.pid`)
    // --bake-ms 1000 (default 5000): the passed socket through a reload and an upgrade is tested, not the wait.
    const child = spawn('systemd-socket-activate', ['-l', `127.0.0.1:${port}`, process.execPath, BIN, APP, '--workers', '2', '--scheduling', scheduling, '--bake-ms', '1000', '--pid-file', pidFile, '--main-pid-file', mainPidFile], {
      cwd: tmp, env: Object.assign({}, process.env, { WORKERS: '', PORT: '', NO_COLOR: '1' }), stdio: ['ignore', 'pipe', 'pipe']
    })
    pids.add(child.pid)
    let output = ''
    child.stdout.on('data', (chunk) => { output += chunk })
    child.stderr.on('data', (chunk) => { output += chunk })
    const spawned = await new Promise((resolve) => { child.once('spawn', () => resolve(true)); child.once('error', (err) => resolve(err)) })
    assert.strictEqual(spawned, true, 'systemd-socket-activate must be installed (apt-get install systemd)')
    // It has bound the port once a connection succeeds (that one starts the primary).
    await waitForPort(port, { timeoutMs: 10000 })

    const keepAlive = startLoad({ port, connections: 3, durationMs: 120000, paceMs: 2 })
    const before = await primaryInfo(pidFile)
    assert.strictEqual(before.pid, child.pid, 'the primary is the activated process')
    assert.strictEqual(before.port, port)
    // systemd's PIDFile= reads the bare pid.
    assert.strictEqual(fs.readFileSync(mainPidFile, 'utf8'), `${before.pid}\n`)
    await keepAlive.served(30)
    const fresh = newConnectionLoad(port)
    const reload = await run(['reload', '--pid-file', pidFile])
    assert.strictEqual(reload.code, 0, reload.stdout + reload.stderr + output)
    const upgrade = await run(['upgrade', '--pid-file', pidFile])
    assert.strictEqual(upgrade.code, 0, upgrade.stdout + upgrade.stderr + output)
    const after = await primaryInfo(pidFile, before.pid)
    // Rewritten before the old primary exits: systemd reads it again when its main pid exits.
    assert.strictEqual(fs.readFileSync(mainPidFile, 'utf8'), `${after.pid}\n`)
    await eventually(() => fresh.results.primaries.has(after.pid), { timeoutMs: 20000, what: 'a response from the new primary\'s workers' })
    await eventually(() => !isAlive(before.pid), { timeoutMs: 30000, what: 'the old primary to exit\n' + output })
    assert.strictEqual(fs.readFileSync(mainPidFile, 'utf8'), `${after.pid}\n`, 'the old primary leaves the new one\'s pid there')
    await keepAlive.served(30)
    await stopLoadsLosingNothing(fresh, keepAlive)
    const stop = await run(['stop', '--pid-file', pidFile])
    assert.strictEqual(stop.code, 0, stop.stderr)
    assert.ok(!fs.existsSync(mainPidFile))
  })
}

/**
 * `clusterize upgrade` of the primary in `pidFile`, `times` times in a row, under a new connection
 * per request and under kept-alive connections: each new primary's workers answer and the first
 * old primary exits. Linux resets connections still queued in a SO_REUSEPORT socket that closes
 * (an old worker's) unless net.ipv4.tcp_migrate_req is 1 (docs/operations.md): never a
 * refusal. Kept-alive connections lose nothing. Then the CLI stops the last primary.
 * @param {{ port: number, pidFile: string, first: { pid: number }, output: () => string, times?: number }} options
 */
async function assertUpgradesUnderLoad ({ port, pidFile, first, output, times = 1 }) {
  const fresh = newConnectionLoad(port)
  const keepAlive = startLoad({ port, connections: 3, durationMs: 120000, paceMs: 2 })
  await keepAlive.served(30)
  let previous = first
  for (let i = 0; i < times; i++) {
    const upgrade = await run(['upgrade', '--pid-file', pidFile])
    assert.strictEqual(upgrade.code, 0, upgrade.stdout + upgrade.stderr + output())
    const next = await primaryInfo(pidFile, previous.pid)
    await eventually(() => fresh.results.primaries.has(next.pid), { timeoutMs: 20000, what: `a response from the workers of primary ${i + 2}` })
    if (i === 0) await eventually(() => !isAlive(first.pid), { timeoutMs: 30000, what: 'the old primary to exit\n' + output() })
    previous = next
  }
  await keepAlive.served(30)
  const [freshResults, keepAliveResults] = await Promise.all([fresh.stop(), keepAlive.stop()])
  if (tcpMigrateReq()) assert.deepStrictEqual(freshResults.failures, [], 'new-connection load')
  else assert.deepStrictEqual(freshResults.failures.filter((code) => code !== 'ECONNRESET'), [], 'new-connection load')
  assert.deepStrictEqual(keepAliveResults.failures, [], 'keep-alive load')
  for (const pid of keepAliveResults.pids.keys()) pids.add(pid)
  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
}

test("scheduling 'none' on a plain start: a worker passes on the socket node:cluster shares, and the upgrade loses no request", async () => {
  const port = await freePort()
  const { pidFile, out } = startPrimary('none', port, ['--workers', '2', '--scheduling', 'none'])
  const before = await primaryInfo(pidFile)
  // Twice: the second from the new primary, which was given its socket.
  await assertUpgradesUnderLoad({ port, pidFile, first: before, output: () => out.text, times: 2 })
})

test("scheduling 'balanced': the new primary takes the shared socket the workers accept from; its workers accept from it once the old primary says go, and no request fails", async () => {
  const port = await freePort()
  const { pidFile, out } = startPrimary('balanced', port, ['--workers', '2', '--scheduling', 'balanced'])
  const before = await primaryInfo(pidFile)
  const status = await run(['status', '--pid-file', pidFile])
  assert.match(status.stdout, /scheduling balanced/, status.stdout + out.text)
  const fresh = newConnectionLoad(port)
  const keepAlive = startLoad({ port, connections: 3, durationMs: 120000, paceMs: 2 })
  await keepAlive.served(30)
  const upgrade = await run(['upgrade', '--pid-file', pidFile])
  assert.strictEqual(upgrade.code, 0, upgrade.stdout + upgrade.stderr + out.text)
  const after = await primaryInfo(pidFile, before.pid)
  await eventually(() => fresh.results.primaries.has(after.pid), { timeoutMs: 20000, what: 'a response from the new primary\'s workers' })
  await eventually(() => !isAlive(before.pid), { timeoutMs: 30000, what: 'the old primary to exit\n' + out.text })
  // And again from the new primary, which holds the inherited socket now.
  const second = await run(['upgrade', '--pid-file', pidFile])
  assert.strictEqual(second.code, 0, second.stdout + second.stderr + out.text)
  const third = await primaryInfo(pidFile, after.pid)
  await eventually(() => fresh.results.primaries.has(third.pid), { timeoutMs: 20000, what: 'a response from the third primary\'s workers' })
  const again = await run(['status', '--pid-file', pidFile])
  assert.match(again.stdout, /scheduling balanced/, again.stdout + out.text)
  await keepAlive.served(30)
  // One socket (no SO_REUSEPORT): what is queued in it waits for whichever worker accepts next.
  await stopLoadsLosingNothing(fresh, keepAlive)
  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
})

test("an upgrade from 'rr' to 'balanced' (a release whose default differs): the new primary adopts the socket the old one accepts on, and no request fails", async () => {
  const port = await freePort()
  const { pidFile, out } = startPrimary('rr-to-balanced', port, ['--workers', '2', '--scheduling', 'rr'])
  const before = await primaryInfo(pidFile)
  const fresh = newConnectionLoad(port)
  const keepAlive = startLoad({ port, connections: 3, durationMs: 120000, paceMs: 2 })
  await keepAlive.served(30)
  // Flags after `--` are added to the old primary's: the last --scheduling wins.
  const upgrade = await run(['upgrade', '--pid-file', pidFile, '--', '--scheduling', 'balanced'])
  assert.strictEqual(upgrade.code, 0, upgrade.stdout + upgrade.stderr + out.text)
  const after = await primaryInfo(pidFile, before.pid)
  await eventually(() => fresh.results.primaries.has(after.pid), { timeoutMs: 20000, what: 'a response from the new primary\'s workers' })
  await eventually(() => !isAlive(before.pid), { timeoutMs: 30000, what: 'the old primary to exit\n' + out.text })
  const status = await run(['status', '--pid-file', pidFile])
  assert.match(status.stdout, /scheduling balanced/, status.stdout + out.text)
  await keepAlive.served(30)
  await stopLoadsLosingNothing(fresh, keepAlive)
  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
})

test("scheduling 'reuseport' (Node 24): the new workers bind next to the old ones; no connection is refused, kept-alive ones lose nothing", async () => {
  const node24 = process.versions.node.startsWith('24.') ? process.execPath : nodeBinary('node@24')
  const port = await freePort()
  const pidFile = path.join(tmp, 'reuseport.pid')
  const child = spawn(node24, [BIN, APP, '--port', String(port), '--host', '127.0.0.1', '--pid-file', pidFile, '--workers', '2', '--scheduling', 'reuseport'], {
    cwd: tmp, env: Object.assign({}, process.env, { WORKERS: '', PORT: '', NO_COLOR: '1' }), stdio: ['ignore', 'pipe', 'pipe']
  })
  pids.add(child.pid)
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const before = await primaryInfo(pidFile)
  const status = await run(['status', '--pid-file', pidFile])
  assert.match(status.stdout, /scheduling reuseport/, status.stdout + output)
  await assertUpgradesUnderLoad({ port, pidFile, first: before, output: () => output })
})

test('as PID 1 (a container) the upgrade is refused with a message that points to a rolling update or an init', async () => {
  const port = await freePort()
  const pidFile = path.join(tmp, 'pid1.pid')
  // A new pid namespace makes the primary PID 1; --kill-child takes it (and so its namespace) down with unshare.
  const child = spawn('unshare', ['--pid', '--fork', '--kill-child', process.execPath, BIN, APP, '--port', String(port), '--host', '127.0.0.1', '--pid-file', pidFile, '--workers', '1'], {
    cwd: tmp, env: Object.assign({}, process.env, { WORKERS: '', PORT: '', NO_COLOR: '1' }), stdio: ['ignore', 'pipe', 'pipe']
  })
  pids.add(child.pid)
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const info = await eventually(() => {
    try { return JSON.parse(fs.readFileSync(pidFile, 'utf8')) } catch { return null }
  }, { timeoutMs: 30000, what: () => 'the pid file\n' + output })
  try {
    assert.strictEqual(info.pid, 1, 'the primary runs as PID 1 ' + output)
    const reply = await sendControl(info.controlSocket, { cmd: 'upgrade' }, 30000)
    assert.strictEqual(reply.ok, true)
    assert.strictEqual(reply.result.ok, false)
    assert.match(reply.result.reason, /this primary is PID 1 \(a container\).*Roll out a new container instead \(rolling update\).*docker run --init/)
    const res = await get(port, '/')
    assert.strictEqual(res.status, 200, 'it keeps serving')
  } finally {
    // unshare --fork ignores SIGTERM while it waits; its death SIGKILLs PID 1 and so the namespace.
    child.kill('SIGKILL')
    await new Promise((resolve) => child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', resolve))
  }
})

test('the old primary killed (kill -9) while the new one boots: the new one serves on the inherited socket and owns the pid file', async () => {
  const port = await freePort()
  const slowFile = path.join(tmp, 'slow')
  const { child, pidFile, out } = startPrimary('killed', port, ['--workers', '1'], { UPGRADE_SLOW_FILE: slowFile })
  const before = await primaryInfo(pidFile)
  fs.writeFileSync(slowFile, '')
  const upgrade = run(['upgrade', '--pid-file', pidFile])
  // Only once the new primary exists does it hold the sockets; a kill before the spawn is another test.
  await eventually(() => /upgrade: new primary \d+ started/.test(out.text), { timeoutMs: 20000, what: () => 'the new primary to start\n' + out.text })
  child.kill('SIGKILL')
  const reply = await upgrade
  assert.strictEqual(reply.code, 1, 'the CLI lost the primary it asked')
  // Connections made meanwhile wait in the socket's backlog; the new primary answers them.
  const res = await get(port, '/')
  assert.strictEqual(res.status, 200)
  const after = await primaryInfo(pidFile, before.pid)
  assert.strictEqual(res.json.primary, after.pid)
  assert.match(out.text, new RegExp(`the old primary ${before.pid} went away before handing over; serving on the inherited sockets`))
  const status = await run(['status', '--pid-file', pidFile])
  assert.match(status.stdout, new RegExp(`^primary ${after.pid}: ready`), status.stderr)
  fs.unlinkSync(slowFile)
  const stop = await run(['stop', '--pid-file', pidFile])
  assert.strictEqual(stop.code, 0, stop.stderr)
})
