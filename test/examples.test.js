'use strict'

// Every example runs with its one documented command and does what its README says.
const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawn } = require('child_process')
const path = require('path')
const { request, waitDead } = require('./helpers/cluster')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')

const root = path.join(__dirname, '..')
const running = new Set()

after(async () => {
  for (const child of running) child.kill('SIGKILL')
})

/** `node examples/<name>/server.js` with PORT set; resolves once GET path answers. */
async function runExample (name, env, readyPath) {
  const port = await freePort()
  const child = spawn(process.execPath, [path.join('examples', name, 'server.js')], {
    cwd: root,
    env: Object.assign({}, process.env, { PORT: String(port), WORKERS: '2', REDIS_URL: '' }, env),
    stdio: ['ignore', 'pipe', 'pipe']
  })
  running.add(child)
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  const workerPids = new Set()
  const example = {
    port,
    output: () => output,
    get: (urlPath, options) => request(port, urlPath, options),
    signal: (name) => child.kill(name),
    async stop () {
      child.kill('SIGTERM')
      const result = await exited
      running.delete(child)
      for (const pid of (output.match(/pid=(\d+)/g) || []).map((m) => Number(m.slice(4)))) workerPids.add(pid)
      for (const pid of workerPids) assert.ok(await waitDead(pid), `worker ${pid} exited`)
      return result
    }
  }
  await eventually(async () => {
    // The banner prints once every worker is ready.
    if (!/ready with 2 workers/.test(output)) return false
    const response = await example.get(readyPath || '/').catch(() => ({ status: 0 }))
    return response.status > 0 && response.status < 500
  }, { timeoutMs: 20000, intervalMs: 100, what: () => `example ${name} to answer\n${output}` })
  return example
}

/**
 * The pids that answer `urlPath` on fresh connections: at least `count` requests, and on until
 * `want` distinct pids answered (at most 5 x count): which worker takes a fresh connection is
 * round robin with 'rr' but the kernel's pick with 'balanced' (the default on Linux).
 */
async function distinctPids (example, urlPath, count, options, want = 2) {
  const pids = new Set()
  for (let i = 0; i < count * 5 && (i < count || pids.size < want); i++) pids.add((await example.get(urlPath, options)).json.pid)
  return pids
}

test('examples/hello: two workers, two pids', async () => {
  const example = await runExample('hello')
  assert.strictEqual((await distinctPids(example, '/', 8)).size, 2)
  assert.match(example.output(), /ready with 2 workers/)
  assert.strictEqual((await example.stop()).code, 0)
})

test('examples/offload: the CPU route returns a hash and /health answers', async () => {
  const example = await runExample('offload', {}, '/health')
  const hash = await example.get('/hash?password=secret')
  assert.strictEqual(hash.status, 200, hash.body)
  assert.match(hash.body, /[0-9a-f]{32}/)
  assert.strictEqual((await example.get('/health')).status, 200)
  assert.strictEqual((await example.stop()).code, 0)
})

test('examples/sessions: log in once, the session is seen by both workers, log out', async () => {
  const example = await runExample('sessions')
  const login = await example.get('/login', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'user=ada' })
  assert.ok(login.status < 400, login.body)
  const cookie = login.headers['set-cookie'][0].split(';')[0]
  const pids = new Set()
  // Fresh connections until both workers answered (the kernel picks the worker with 'balanced').
  for (let i = 0; i < 40 && (i < 8 || pids.size < 2); i++) {
    const profile = await example.get('/profile', { headers: { cookie } })
    assert.strictEqual(profile.status, 200, profile.body)
    assert.match(profile.body, /ada/)
    pids.add(profile.json.pid)
  }
  assert.strictEqual(pids.size, 2, 'both workers saw the same session')
  const logout = await example.get('/logout', { method: 'POST', headers: { cookie } })
  assert.ok(logout.status < 400)
  assert.notStrictEqual((await example.get('/profile', { headers: { cookie } })).status, 200)
  assert.strictEqual((await example.stop()).code, 0)
})

test('examples/cache-invalidation: a PUT on one worker is seen by every worker', async () => {
  const example = await runExample('cache-invalidation', {}, '/products/1')
  for (let i = 0; i < 4; i++) await example.get('/products/1')
  const put = await example.get('/products/1?price=12', { method: 'PUT' })
  assert.ok(put.status < 400, put.body)
  const workers = new Set()
  for (let i = 0; i < 40 && (i < 8 || workers.size < 2); i++) {
    const product = await example.get('/products/1')
    assert.strictEqual(product.json.product.price, 12, product.body)
    workers.add(product.json.worker)
  }
  assert.strictEqual(workers.size, 2)
  assert.strictEqual((await example.stop()).code, 0)
})

test('examples/graceful-k8s: probes answer, SIGTERM lets a slow request finish', async () => {
  const probesPort = await freePort()
  const example = await runExample('graceful-k8s', { PROBES_PORT: String(probesPort) })
  assert.strictEqual((await request(probesPort, '/ready')).status, 200)
  assert.strictEqual((await request(probesPort, '/live')).status, 200)
  const slow = example.get('/slow')
  await new Promise((resolve) => setTimeout(resolve, 300))
  const stopped = example.stop()
  const response = await slow
  assert.strictEqual(response.status, 200)
  assert.strictEqual(response.json.finished, true)
  assert.strictEqual((await stopped).code, 0)
})

test('examples/chat: the logged-in user is known on every worker, messages reach every client, and a reload is survived', async () => {
  const { io } = require('socket.io-client')
  const example = await runExample('chat')
  const sockets = []
  try {
    async function join (user) {
      const login = await example.get('/login', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `user=${user}` })
      assert.strictEqual(login.status, 200, login.body)
      const cookie = login.headers['set-cookie'][0].split(';')[0]
      const socket = io(`http://127.0.0.1:${example.port}`, { transports: ['websocket'], extraHeaders: { cookie }, reconnectionDelay: 100, reconnectionDelayMax: 500 })
      sockets.push(socket)
      const client = { socket, user, got: [], welcomes: [] }
      socket.on('chat', (m) => client.got.push(m))
      socket.on('welcome', (w) => client.welcomes.push(w))
      await eventually(() => client.welcomes.length === 1, { what: `${user} welcomed` })
      assert.strictEqual(client.welcomes[0].user, user)
      return client
    }
    const ada = await join('ada')
    const bob = await join('bob')
    ada.socket.emit('chat', 'hello')
    await eventually(() => bob.got.some((m) => m.user === 'ada' && m.text === 'hello'), { what: 'bob gets ada\'s message' })

    const before = ada.welcomes[0].worker
    example.signal('SIGUSR2')
    // The sockets are closed with 1012 once the new workers are ready; the client reconnects by itself.
    await eventually(() => ada.welcomes.length >= 2 && bob.welcomes.length >= 2, { timeoutMs: 40000, what: 'both reconnected after the reload' })
    assert.strictEqual(ada.welcomes[ada.welcomes.length - 1].user, 'ada', 'still logged in after the reload')
    assert.notStrictEqual(ada.welcomes[ada.welcomes.length - 1].worker, before, 'served by a new worker')
    bob.socket.emit('chat', 'still here')
    await eventually(() => ada.got.some((m) => m.user === 'bob' && m.text === 'still here'), { what: 'messages flow again after the reload' })
  } finally {
    for (const socket of sockets) socket.disconnect()
    await example.stop()
  }
})

test('examples/app-state: the rate limit holds for both workers, one poller, each cron fire once, metrics summed', async () => {
  const probesPort = await freePort()
  const example = await runExample('app-state', { PROBES_PORT: String(probesPort) }, '/runs')
  const codes = []
  for (let i = 0; i < 7; i++) codes.push((await example.get('/limited')).status)
  assert.deepStrictEqual(codes, [200, 200, 200, 200, 200, 429, 429])
  let views = []
  await eventually(async () => {
    views = []
    for (let i = 0; i < 6; i++) views.push((await example.get('/runs')).json)
    const fires = views.flatMap((v) => v.cronHere.map((f) => f.at))
    return new Set(views.map((v) => v.pid)).size === 2 && new Set(fires).size >= 3
  }, { timeoutMs: 20000, intervalMs: 500, what: 'both workers seen and three cron fires' })
  const byPid = new Map(views.map((v) => [v.pid, v]))
  const fires = [...byPid.values()].flatMap((v) => v.cronHere.map((f) => f.at))
  assert.strictEqual(fires.length, new Set(fires).size, 'no fire ran on both workers')
  assert.strictEqual([...byPid.values()].filter((v) => v.pollerHere !== null).length, 1, 'the poller runs on one worker')
  // Every /limited request reached a worker (the limiter runs after the counter), whichever served it.
  const limited = (await request(probesPort, '/metrics')).body.match(/^app_requests_total\{route="\/limited"\} (\d+)$/m)
  assert.ok(limited, 'the app counter is on the primary\'s /metrics')
  assert.strictEqual(Number(limited[1]), 7, 'the seven /limited requests, summed over both workers')
  assert.strictEqual((await example.stop()).code, 0)
})
