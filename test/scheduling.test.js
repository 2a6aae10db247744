'use strict'

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { startLoad } = require('./helpers/load')
const { tcpMigrateReq } = require('./helpers/net')
const { reusePortSupport, defaultScheduling, resolveScheduling } = require('../lib/primary/scheduling')
const { pickRendezvous } = require('../lib/primary/rendezvous')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const env = (options) => ({ CZ_TEST_OPTIONS: JSON.stringify(options) })
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const reuseport = reusePortSupport()

after(stopAll)

test("no scheduling option: 'balanced' on Linux with Node >= 22.12; elsewhere 'rr', logged with the reason", () => {
  const linux = { platform: 'linux', canBalance: true }
  assert.deepStrictEqual(defaultScheduling(Object.assign({ version: '24.11.0' }, linux)), { mode: 'balanced' })
  assert.deepStrictEqual(defaultScheduling(Object.assign({ version: '22.12.0' }, linux)), { mode: 'balanced' })
  const cases = [
    [{ version: '22.11.0', platform: 'linux', canBalance: true }, /Node 22\.11\.0 is older than 22\.12/],
    [{ version: '24.11.0', platform: 'darwin', canBalance: true }, /darwin is not Linux/],
    [{ version: '24.11.0', platform: 'win32', canBalance: true }, /on Windows/],
    [{ version: '24.11.0', platform: 'linux', canBalance: false }, /cannot bind a socket without listening/]
  ]
  for (const [where, reason] of cases) {
    const chosen = defaultScheduling(where)
    assert.strictEqual(chosen.mode, 'rr', JSON.stringify(where))
    assert.match(chosen.reason, reason)
  }
  // An explicit mode is taken as asked, with nothing logged; the default logs only when it falls back.
  const lines = []
  const log = { info: (m) => lines.push(m), warn: (m) => lines.push(m) }
  assert.strictEqual(resolveScheduling({ scheduling: 'rr' }, log).mode, 'rr')
  assert.deepStrictEqual(lines, [])
  const here = defaultScheduling()
  assert.strictEqual(resolveScheduling({ scheduling: undefined }, log).mode, here.mode)
  if (here.reason) assert.match(lines.join('\n'), /scheduling: 'rr' \(the default is 'balanced' on Linux with Node >= 22\.12; here /)
  else assert.deepStrictEqual(lines, [])
})

async function pidFrom (cluster, localAddress) {
  return (await cluster.get('/', { localAddress })).json.pid
}

test('rendezvous hashing: removing a slot moves only the keys that were on it', () => {
  const slots = [0, 1, 2, 3]
  const keys = Array.from({ length: 400 }, (_, i) => `10.0.${i >> 8}.${i & 255}`)
  const before = new Map(keys.map((key) => [key, pickRendezvous(key, slots, (s) => s)]))
  const counts = [0, 0, 0, 0]
  for (const slot of before.values()) counts[slot]++
  assert.ok(counts.every((n) => n > 50), `keys spread over all slots: ${counts}`)
  const without2 = [0, 1, 3]
  for (const [key, slot] of before) {
    const now = pickRendezvous(key, without2, (s) => s)
    if (slot !== 2) assert.strictEqual(now, slot, `${key} stayed on ${slot}`)
  }
})

test("'sticky': one client address stays on one worker; several addresses spread; killing one worker moves only its clients", async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, scheduling: 'sticky', restart: { backoffInitialMs: 50, backoffMaxMs: 100 } }) })
  const home = await pidFrom(cluster, '127.0.0.1')
  for (let i = 0; i < 8; i++) assert.strictEqual(await pidFrom(cluster, '127.0.0.1'), home)
  const byAddress = new Map()
  for (let i = 2; i <= 12; i++) {
    const address = `127.0.0.${i}`
    const pid = await pidFrom(cluster, address)
    assert.strictEqual(await pidFrom(cluster, address), pid, `${address} is sticky`)
    byAddress.set(address, pid)
  }
  assert.strictEqual(new Set(byAddress.values()).size, 2, 'addresses spread over both workers')

  const victim = [...new Set(byAddress.values())][0]
  process.kill(victim, 'SIGKILL')
  await cluster.waitEvent('worker:exit', (d) => d.pid === victim)
  for (const [address, pid] of byAddress) {
    if (pid !== victim) assert.strictEqual(await pidFrom(cluster, address), pid, `${address} did not move`)
  }
  await cluster.stop()
})

test("load-aware 'rr': new connections avoid a worker whose event loop is overloaded", async () => {
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, scheduling: 'rr', health: { heartbeatMs: 100, heartbeatTimeoutMs: 10000, maxEventLoopDelayMs: 100 } })
  })
  let busy = null
  // The hog answers at once and then blocks its loop in 250 ms chunks for
  // 12 s: long enough on a loaded box for heartbeats to report it and for the
  // ten requests below to be placed while it is still overloaded.
  for (let i = 0; i < 4 && !busy; i++) busy = (await cluster.get('/hog?ms=12000&chunk=250')).json.pid
  let overloaded = false
  for (let i = 0; i < 160 && !overloaded; i++) {
    const stats = await cluster.stats()
    overloaded = stats.workers.some((w) => w.pid === busy && w.overloaded)
    if (!overloaded) await sleep(50)
  }
  assert.ok(overloaded, 'the primary marked the hogging worker overloaded')
  const pids = []
  for (let i = 0; i < 10; i++) pids.push(await pidFrom(cluster))
  assert.ok(pids.every((pid) => pid !== busy), `no new connection went to the busy worker: ${pids}`)
  await cluster.stop()
})

test("'rr': new connections pass over a worker whose event loop is blocked, before any heartbeat could say so", async () => {
  // No overload skipping (maxEventLoopDelayMs 0): only the handoffs still in
  // flight to the blocked worker (it does not read its IPC channel) steer.
  const cluster = await startCluster(fixture, {
    env: env({ workers: 2, scheduling: 'rr', health: { heartbeatMs: 100, heartbeatTimeoutMs: 30000, maxEventLoopDelayMs: 0 } })
  })
  const blocking = cluster.get('/block?ms=4000')
  await sleep(500) // the /block request reaches its worker and blocks it
  const answers = []
  for (let i = 0; i < 10; i++) {
    const answer = pidFrom(cluster)
    answers.push(answer)
    // One at a time while they are answered; one that waits (on the blocked worker) is left behind.
    await Promise.race([answer, sleep(300)])
  }
  const blocked = (await blocking).json.pid
  const pids = await Promise.all(answers)
  const toBlocked = pids.filter((pid) => pid === blocked).length
  assert.ok(toBlocked <= 2, `at most two new connections went to the blocked worker (one written, one queued behind it): ${pids}, blocked ${blocked}`)
  await cluster.stop()
})

test("'reuseport': on Node >= 22.12 every worker binds the port and a reload under load loses nothing; elsewhere a warning and a fallback to 'rr'", async () => {
  // A 1 s bake (default 5 s): what is tested is the hand-over of the port's queue, not the wait.
  const cluster = await startCluster(fixture, { env: env({ workers: 2, scheduling: 'reuseport', reload: { bakeMs: 1000 } }) })
  const pids = new Set()
  for (let i = 0; i < 40 && pids.size < 2; i++) pids.add(await pidFrom(cluster))
  assert.strictEqual(pids.size, 2, 'connections spread over both workers')
  const stats = await cluster.stats()
  if (!reuseport.supported) {
    assert.match(cluster.output, /scheduling 'reuseport' is not available: Node .* falling back to 'rr'/)
    assert.strictEqual(stats.scheduling, 'rr')
  } else {
    assert.strictEqual(stats.scheduling, 'reuseport')
    assert.doesNotMatch(cluster.output, /falling back/)
  }
  const load = startLoad({ port: cluster.port, connections: 8, durationMs: 60000, paceMs: 2 })
  await sleep(300)
  const result = await cluster.reload()
  await sleep(300)
  const results = await load.stop()
  assert.strictEqual(result.ok, true)
  assert.strictEqual(results.non2xx, 0, JSON.stringify(results.failures.slice(0, 3)))
  if (!reuseport.supported || tcpMigrateReq()) {
    assert.strictEqual(results.failed, 0, JSON.stringify(results.failures.slice(0, 3)))
  } else {
    // Without net.ipv4.tcp_migrate_req, Linux resets what is still queued on a closing
    // SO_REUSEPORT socket (docs/operations.md): a reset, never a refusal or a wrong answer.
    assert.deepStrictEqual(results.failures.filter((f) => f.error !== 'ECONNRESET'), [], 'only resets')
  }
  await cluster.stop()
})


test("'none': workers accept on the shared socket and serve", async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, scheduling: 'none' }) })
  const response = await cluster.get('/')
  assert.strictEqual(response.status, 200)
  await cluster.stop()
})
