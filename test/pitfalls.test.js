'use strict'

/**
 * Drop-in pitfalls: an app that keeps express-session's default
 * MemoryStore under several workers (a warning per worker, and a fix with
 * no code change: defaultSessionStore 'cluster' / --sessions cluster), an
 * app that calls app.listen() itself (a warning per worker), and HOST read
 * from the environment like PORT.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { startCluster, stopAll, request } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { freePort } = require('./helpers/net')
const { resolveConfig } = require('../lib/config')
const { parseArgs, buildOptions } = require('../lib/cli/args')

const fixture = path.join(__dirname, 'fixtures/plain-session-cluster.js')
const env = (options, extra) => Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options) }, extra)

after(stopAll)

/**
 * GET /count on a new connection each time, carrying the session cookie: `times` requests, and on
 * until two workers answered (at most 5 x times; the kernel picks the worker with 'balanced').
 */
async function counts (port, times) {
  let cookie = null
  const seen = []
  for (let i = 0; i < times * 5 && (i < times || new Set(seen.map((s) => s.pid)).size < 2); i++) {
    const res = await request(port, '/count', { headers: cookie ? { Cookie: cookie } : {} })
    assert.strictEqual(res.status, 200, res.body)
    if (res.headers['set-cookie']) cookie = res.headers['set-cookie'][0].split(';')[0]
    seen.push(res.json)
  }
  return seen
}

test("express-session's default MemoryStore under 2 workers: each worker warns once, with the fix", async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2 }) })
  const seen = await counts(cluster.port, 12)
  assert.strictEqual(new Set(seen.map((s) => s.pid)).size, 2, 'both workers served')
  const warning = /express-session's default MemoryStore keeps sessions in each worker: with 2 workers/g
  await eventually(() => (cluster.output.match(warning) || []).length === 2, { what: () => 'a warning from each worker:\n' + cluster.output })
  assert.match(cluster.output, /--sessions cluster/)
  await counts(cluster.port, 6)
  assert.strictEqual(cluster.output.match(warning).length, 2, 'once per worker')
  await cluster.stop()
})

test("defaultSessionStore 'cluster' makes express-session's default store the cluster store: the count goes on across workers", async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, defaultSessionStore: 'cluster' }) })
  const seen = await counts(cluster.port, 10)
  assert.strictEqual(new Set(seen.map((s) => s.pid)).size, 2, 'both workers served')
  assert.deepStrictEqual(seen.map((s) => s.n), seen.map((s, i) => i + 1), 'the count goes on: 1, 2, 3, ...')
  assert.ok(seen.length >= 10)
  assert.doesNotMatch(cluster.output, /default MemoryStore keeps sessions/)
  await cluster.stop()
  assert.strictEqual(buildOptions(parseArgs(['app.js', '--sessions', 'cluster']).flags, {}).defaultSessionStore, 'cluster')
  assert.throws(() => parseArgs(['app.js', '--sessions', 'mongo']), /--sessions must be "cluster" .*"redis" .* or "memory"/)
})

test('the MemoryStore is noticed when the app builds it, before any request: the warning, and the banner and /stats name it', async () => {
  for (const preload of ['0', '1']) {
    const cluster = await startCluster(fixture, { env: env({ workers: 2 }, { CZ_PRELOAD_SESSION: preload }) })
    const warning = /express-session's default MemoryStore keeps sessions in each worker: with 2 workers/g
    await eventually(() => (cluster.output.match(warning) || []).length === 2, { what: () => 'a warning from each worker, with no request made:\n' + cluster.output })
    await eventually(async () => (await cluster.stats()).workers.every((w) => w.session && /MemoryStore/.test(w.session.store)),
      { what: 'both workers to report the MemoryStore in their heartbeat' })
    await counts(cluster.port, 6)
    assert.strictEqual(cluster.output.match(warning).length, 2, 'still once per worker')
    await cluster.stop()
  }
})

test("defaultSessionStore 'cluster' when the app loaded express-session first: each worker says at boot that its MemoryStore stays", async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, defaultSessionStore: 'cluster' }, { CZ_PRELOAD_SESSION: '1' }) })
  const warning = /defaultSessionStore 'cluster' \(--sessions cluster\) cannot replace the default store of express-session at .+: it was loaded before clusterize\(\) ran/g
  await eventually(() => (cluster.output.match(warning) || []).length === 2, { what: () => 'a boot warning from each worker:\n' + cluster.output })
  assert.match(cluster.output, /require\('express-session'\) inside createApp/)
  await cluster.stop()
})

test('an app that calls app.listen() itself is warned once per worker', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2 }, { CZ_APP_LISTENS: '1' }) })
  const warning = /the app called listen\(\) itself while clusterize was building it/g
  await eventually(() => (cluster.output.match(warning) || []).length === 2, { what: () => 'a warning from each worker:\n' + cluster.output })
  assert.match(cluster.output, /Remove app\.listen\(\)/)
  await cluster.stop()
})

// 'balanced': the primary's socket is bound but not listening, so a real bind in the app's listen() could
// succeed and take the port from the workers (they never became ready before the fix).
for (const scheduling of ['rr', 'balanced']) {
  test(`'${scheduling}': app.listen(process.env.PORT) does not crash the workers and takes nothing from them: clusterize already serves that port`, async () => {
    const port = await freePort()
    const cluster = await startCluster(fixture, { env: env({ workers: 2, port, scheduling }, { CZ_APP_LISTENS: 'port', PORT: String(port) }) })
    const ignored = /the app's own listen\(\) on port \d+ binds nothing: clusterize serves the app on that port, and the app's server stands in for it/g
    await eventually(() => (cluster.output.match(ignored) || []).length === 2, { what: () => 'both workers to outlive their own listen():\n' + cluster.output })
    const seen = await counts(cluster.port, 8)
    assert.strictEqual(new Set(seen.map((s) => s.pid)).size, 2, 'both workers served')
    const stats = await cluster.stats()
    assert.deepStrictEqual(stats.workers.map((w) => w.restarts), [0, 0])
    assert.deepStrictEqual(cluster.events.filter((e) => e.event === 'worker:exit'), [], 'no worker crashed')
    await cluster.stop()
  })
}

test('HOST is read from the environment like PORT; the option wins', () => {
  assert.strictEqual(resolveConfig({}, { HOST: '127.0.0.1' }).host, '127.0.0.1')
  assert.strictEqual(resolveConfig({ host: '::1' }, { HOST: '127.0.0.1' }).host, '::1')
  assert.strictEqual(resolveConfig({}, {}).host, undefined)
})
