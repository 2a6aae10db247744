'use strict'

/**
 * A deploy must never take the service down: broken reloads that fail only
 * after the new code reported ready, bursts of reload signals, a primary killed with
 * SIGKILL, keep-alive clients that pause between requests, and an app that
 * can never load. Real clusters, real signals, real HTTP on loopback.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { execFile } = require('child_process')
const fs = require('fs')
const net = require('net')
const os = require('os')
const path = require('path')
const { startCluster, stopAll, waitDead } = require('./helpers/cluster')
const { startLoad } = require('./helpers/load')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const BIN = path.join(__dirname, '..', 'bin', 'clusterize.js')
const env = (options, extra) => Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options) }, extra)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-reload-safety-'))

after(async () => {
  await stopAll()
  fs.rmSync(tmp, { recursive: true, force: true })
})

for (const crashAfterMs of [300, 1000]) {
  test(`a reload into code that crashes ${crashAfterMs} ms after it is ready is rolled back under load: old workers serve, zero failed requests`, async () => {
    const flag = path.join(tmp, `crash-${crashAfterMs}`)
    const cluster = await startCluster(fixture, {
      env: env({ workers: 2, reload: { bakeMs: 3000 } }, { CZ_CRASH_AFTER_READY_FILE: flag })
    })
    const before = new Set(cluster.workerPids)
    const load = startLoad({ port: cluster.port, connections: 6, durationMs: 60000, paceMs: 2 })
    await load.served(50)
    fs.writeFileSync(flag, String(crashAfterMs))
    const result = await cluster.reload()
    await load.served(50)
    const results = await load.stop()
    assert.strictEqual(result.ok, false, JSON.stringify(result))
    assert.strictEqual(result.rolledBack, true)
    assert.strictEqual(result.replaced, 0)
    assert.match(result.reason, /generation 2\) exited with code \d+ \d+ ms after it was ready/)
    assert.strictEqual(results.failed + results.non2xx, 0, JSON.stringify(results.failures.slice(0, 3)))
    assert.ok(results.ok > 50, `load ran (${results.ok} requests)`)
    const stats = await cluster.stats()
    assert.deepStrictEqual(new Set(stats.workers.map((w) => w.pid)), before, 'the old workers still serve')
    assert.strictEqual(stats.generation, 1)
    assert.strictEqual(stats.crashLooping, false)
    assert.ok(cluster.child.exitCode === null, 'the primary is still running')
    await cluster.stop()
  })
}

test('after rolled-back reloads, a crashed old worker is replaced by one labelled with the code it loads; the old code keeps its own failure budget', async () => {
  const flag = path.join(tmp, 'broken-boot')
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, restart: { backoffInitialMs: 10, maxCrashes: 3 } }, { CZ_BOOT_FAIL_FILE: flag })
  })
  const before = new Set(cluster.workerPids)
  fs.writeFileSync(flag, 'broken')
  for (let i = 0; i < 3; i++) {
    const result = await cluster.reload()
    assert.strictEqual(result.rolledBack, true, JSON.stringify(result))
  }
  fs.rmSync(flag)
  const victim = (await cluster.get('/crash')).json.pid
  // The failed canaries never became ready: the only new ready worker is the replacement.
  const replaced = await cluster.waitEvent('worker:ready', (d) => d.pid !== victim && !before.has(d.pid))
  assert.strictEqual(replaced.data.generation, 4, 'it runs the code of the last reload attempt')
  const stats = await cluster.stats()
  assert.strictEqual(stats.crashLooping, false, 'three failed canaries and one crash are not a crash loop')
  assert.strictEqual(stats.generation, 1)
  assert.deepStrictEqual(stats.workers.map((w) => w.generation).sort(), [1, 4])
  assert.strictEqual(cluster.events.filter((e) => e.event === 'crashloop').length, 0)
  await cluster.stop()
})

test('a burst of ten reload signals gives at most two reloads, and every worker is replaced', async () => {
  // The first reload bakes for 3 s: the whole burst (10 signals, 20 ms apart) arrives while it runs.
  const cluster = await startCluster(fixture, { env: env({ workers: 2, reload: { bakeMs: 3000 } }) })
  const before = new Set(cluster.workerPids)
  for (let i = 0; i < 10; i++) {
    cluster.signal('SIGUSR2')
    await sleep(20)
  }
  await cluster.waitEvent('reload:done')
  // Every reload that started has reported (a queued one starts as soon as the one before ends).
  const count = (name) => cluster.events.filter((e) => e.event === name).length
  await eventually(async () => {
    if (count('reload:start') !== count('reload:done')) return false
    await sleep(100)
    return count('reload:start') === count('reload:done')
  }, { timeoutMs: 60000, what: 'every reload that started to finish' })
  assert.ok(count('reload:start') <= 2, `${count('reload:start')} reloads started`)
  const reloads = cluster.events.filter((e) => e.event === 'reload:done')
  assert.ok(reloads.length >= 1 && reloads.length <= 2, `${reloads.length} reloads ran`)
  assert.ok(reloads.every((e) => e.data.ok), JSON.stringify(reloads.map((e) => e.data)))
  await cluster.stop()
})

test('SIGKILL of the primary: workers finish the requests in flight, then exit by themselves', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, health: { heartbeatMs: 100 }, shutdown: { timeoutMs: 8000 } }) })
  const workerPids = Array.from(cluster.workerPids)
  const slow = []
  for (let i = 0; i < 6; i++) slow.push(cluster.get('/slow?ms=1500'))
  await cluster.waitInFlight(6)
  cluster.signal('SIGKILL')
  const responses = await Promise.allSettled(slow)
  for (const response of responses) {
    assert.strictEqual(response.status, 'fulfilled', response.reason && response.reason.message)
    assert.strictEqual(response.value.status, 200)
    assert.strictEqual(response.value.json.slow, true)
  }
  for (const pid of workerPids) assert.ok(await waitDead(pid, 10000), `worker ${pid} exited`)
  await cluster.stop()
})

test('a keep-alive client that pauses longer than a second between requests is never cut off by a reload', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 1, reload: { bakeMs: 0 } }) })
  const client = rawKeepAliveClient(cluster.port)
  const pauseMs = 1500
  for (let i = 0; i < 3; i++) {
    assert.strictEqual((await client.get('/')).status, 200)
    await sleep(pauseMs)
  }
  assert.strictEqual((await client.get('/')).status, 200)
  // The worker starts draining while this client is idle between requests.
  const reloaded = cluster.reload()
  await sleep(pauseMs)
  const last = await client.get('/')
  assert.strictEqual(last.status, 200, 'the request after the pause was answered')
  assert.match(last.head, /connection: close/i, 'and told the client to reconnect')
  assert.strictEqual((await reloaded).ok, true)
  client.destroy()
  await cluster.stop()
})

test('an app file that exports no app stops at the first failure with one message saying what to export', async () => {
  const dir = fs.mkdtempSync(path.join(tmp, 'bad-app-'))
  const cases = [
    { file: 'empty.js', source: 'module.exports = {}\n', message: /must export an Express app.*module\.exports = \(\) => app.*it exports an object with keys \[\]/ },
    { file: 'syntax.js', source: 'module.exports = () => {\n', message: /cannot load .*syntax\.js: .*(Unexpected end of input|SyntaxError)/ },
    { file: 'missing.js', source: "require('./no-such-module')\nmodule.exports = () => (req, res) => res.end()\n", message: /cannot load .*missing\.js: Cannot find module '\.\/no-such-module'/ }
  ]
  for (const c of cases) {
    fs.writeFileSync(path.join(dir, c.file), c.source)
    const result = await runCli([c.file, '--workers', '2', '--port', '0', '--host', '127.0.0.1', '--pid-file', path.join(dir, c.file + '.pid')], dir)
    const output = result.stdout + result.stderr
    assert.strictEqual(result.code, 1, output)
    assert.match(output, c.message)
    assert.strictEqual(output.match(/cannot start/g).length, 1, output)
    assert.doesNotMatch(output, /failed to boot|crash loop|restarting worker/, output)
  }
})

function runCli (args, cwd) {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], {
      cwd,
      env: Object.assign({}, process.env, { PORT: '', WORKERS: '', REDIS_URL: '', NO_COLOR: '1' }),
      timeout: 60000
    }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr })
    })
  })
}

/**
 * One keep-alive connection written to by hand: unlike http.Agent it does
 * not notice the server's FIN before sending, so it sees every race.
 */
function rawKeepAliveClient (port) {
  const socket = net.connect(port, '127.0.0.1')
  let buffer = ''
  let waiting = null
  socket.setEncoding('utf8')
  socket.on('data', (chunk) => {
    buffer += chunk
    settle()
  })
  socket.on('close', () => settle(new Error('connection closed with no response')))
  socket.on('error', (err) => settle(err))
  function settle (err) {
    if (!waiting) return
    const end = buffer.indexOf('\r\n\r\n')
    if (end !== -1) {
      const head = buffer.slice(0, end)
      const length = Number((/content-length: (\d+)/i.exec(head) || [])[1] || 0)
      if (buffer.length >= end + 4 + length) {
        const body = buffer.slice(end + 4, end + 4 + length)
        buffer = buffer.slice(end + 4 + length)
        const done = waiting
        waiting = null
        return done.resolve({ status: Number(head.split(' ')[1]), head, body })
      }
    }
    if (err) {
      const done = waiting
      waiting = null
      done.reject(err)
    }
  }
  return {
    get (urlPath) {
      return new Promise((resolve, reject) => {
        waiting = { resolve, reject }
        socket.write(`GET ${urlPath} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n`)
      })
    },
    destroy () { socket.destroy() }
  }
}
