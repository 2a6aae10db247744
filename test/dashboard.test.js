'use strict'

/**
 * The dashboard on the probes server: token rules over plain HTTP, then the
 * page itself in headless Chromium (Debian's `chromium`, driven by
 * playwright-core): one row per worker, charts with data, a reload and a
 * killed worker in the timeline, data that keeps flowing. A screenshot is
 * written to a temp dir (DASHBOARD_SCREENSHOT=path writes it there too).
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startCluster, stopAll, request } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { resolveConfig } = require('../lib/config')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const env = (options) => ({ CZ_TEST_OPTIONS: JSON.stringify(options) })
const CONTROL = 'control-token-0123456789abcdef'
const VIEW = 'view-token-0123456789abcdef'
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium'

after(stopAll)

function post (port, urlPath, headers) {
  return request(port, urlPath, { method: 'POST', headers })
}

/** The first SSE frame (`hello`) of /dashboard/events. */
function hello (port, query) {
  const http = require('http')
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/dashboard/events' + (query || ''), agent: false }, (res) => {
      if (res.statusCode !== 200) {
        res.resume()
        return resolve({ status: res.statusCode })
      }
      let buffer = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => {
        buffer += chunk
        const match = /event: hello\ndata: (.*)\n\n/.exec(buffer)
        if (match) {
          req.destroy()
          resolve({ status: 200, hello: JSON.parse(match[1]) })
        }
      })
    })
    req.on('error', reject)
  })
}

test('token rules: no control token -> no button and reloads refused; wrong token -> 401; right token reloads', async () => {
  const plain = await startCluster(fixture, { env: env({ workers: 1, probes: { port: 0 } }) })
  assert.strictEqual((await hello(plain.probesPort)).hello.controls, false)
  assert.strictEqual((await post(plain.probesPort, '/control/reload')).status, 403)
  assert.strictEqual((await post(plain.probesPort, '/control/reload', { 'X-Clusterize-Token': CONTROL })).status, 403)
  await plain.stop()

  const controlled = await startCluster(fixture, { env: env({ workers: 1, reload: { bakeMs: 0 }, probes: { port: 0, controlToken: CONTROL } }) })
  assert.strictEqual((await hello(controlled.probesPort)).hello.controls, true)
  assert.strictEqual((await post(controlled.probesPort, '/control/reload')).status, 401)
  assert.strictEqual((await post(controlled.probesPort, '/control/reload', { 'X-Clusterize-Token': 'wrong-token-0123456789abcdef' })).status, 401)
  assert.strictEqual((await post(controlled.probesPort, '/control/reload', { Cookie: `token=${CONTROL}` })).status, 401, 'a cookie is not a token')
  const done = await post(controlled.probesPort, '/control/reload', { 'X-Clusterize-Token': CONTROL })
  assert.strictEqual(done.status, 200)
  assert.strictEqual(done.json.ok, true)
  assert.strictEqual(done.json.generation, 2)
  await controlled.stop()
})

test('a view token guards the page and its events; a non-loopback dashboard without one is refused at startup', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 1, probes: { port: 0, token: VIEW } }) })
  assert.strictEqual((await request(cluster.probesPort, '/dashboard')).status, 401)
  assert.strictEqual((await hello(cluster.probesPort)).status, 401)
  assert.strictEqual((await request(cluster.probesPort, '/dashboard?token=' + VIEW)).status, 200)
  assert.strictEqual((await request(cluster.probesPort, '/dashboard', { headers: { Authorization: 'Bearer ' + VIEW } })).status, 200)
  assert.strictEqual((await hello(cluster.probesPort, '?token=' + VIEW)).status, 200)
  await cluster.stop()

  assert.throws(() => resolveConfig({ probes: { port: 9090, host: '0.0.0.0', dashboard: true } }),
    (err) => err.name === 'ClusterizeOptionError' && err.option === 'probes.token' && /non-loopback/.test(err.message))
  assert.strictEqual(resolveConfig({ probes: { port: 9090, host: '0.0.0.0' } }).probes.dashboard, false, 'off by default off loopback')
  assert.strictEqual(resolveConfig({ probes: { port: 9090 } }).probes.dashboard, true, 'on by default on loopback')
})

test('the page in headless Chromium: a row per worker, charts drawn, a reload and a crash in the timeline, data flowing', async (t) => {
  assert.ok(fs.existsSync(CHROMIUM), `Chromium is needed at ${CHROMIUM} (apt-get install chromium; .ci/run installs it)`)
  const { chromium } = require('playwright-core')
  const cluster = await startCluster(fixture, { env: env({ workers: 2, health: { heartbeatMs: 250 }, reload: { bakeMs: 200 }, probes: { port: 0 } }) })
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run']
  })
  t.after(() => browser.close())
  const page = await browser.newPage({ viewport: { width: 1100, height: 800 } })
  const errors = []
  page.on('pageerror', (err) => errors.push(err.message))
  await page.goto(`http://127.0.0.1:${cluster.probesPort}/dashboard`)
  await page.waitForFunction(() => document.querySelectorAll('#workers tr').length === 2, null, { timeout: 15000 })

  // Some traffic, so requests/s has points.
  for (let i = 0; i < 20; i++) await cluster.get('/')
  await page.waitForFunction(() => ['chart-rps', 'chart-eld', 'chart-rss'].every((id) => Number(document.getElementById(id).dataset.points) >= 2), null, { timeout: 15000 })

  const firstUpdate = await page.textContent('#status')
  await page.waitForFunction((before) => document.getElementById('status').textContent !== before, firstUpdate, { timeout: 10000 })

  cluster.signal('SIGUSR2')
  await page.waitForSelector('#timeline li[data-type="reload-start"]', { timeout: 10000 })
  await page.waitForSelector('#timeline li[data-type="reload-done"]', { timeout: 30000 })

  const victim = (await cluster.stats()).workers.find((w) => w.id === 1)
  process.kill(victim.pid, 'SIGKILL')
  await page.waitForSelector('#timeline li[data-type="worker-exit"]', { timeout: 10000 })
  await page.waitForFunction((pid) => {
    const rows = Array.from(document.querySelectorAll('#workers tr'))
    return rows.length === 2 && rows.every((tr) => tr.dataset.pid !== String(pid)) && rows.some((tr) => tr.children[5].textContent === '1')
  }, victim.pid, { timeout: 15000 })

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-dashboard-'))
  const shot = path.join(dir, 'dashboard.png')
  await page.screenshot({ path: shot, fullPage: true })
  assert.ok(fs.statSync(shot).size > 10000, 'the screenshot has content')
  if (process.env.DASHBOARD_SCREENSHOT) fs.copyFileSync(shot, process.env.DASHBOARD_SCREENSHOT)
  fs.rmSync(dir, { recursive: true, force: true })

  await page.setViewportSize({ width: 390, height: 800 })
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)
  assert.ok(overflow <= 1, `phone width: the page does not scroll sideways (${overflow}px); the table scrolls inside its box`)
  assert.deepStrictEqual(errors, [])
  await cluster.stop()
})

test('examples/observability/grafana-dashboard.json only uses metrics that /metrics exports', async () => {
  const dashboard = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'examples/observability/grafana-dashboard.json'), 'utf8'))
  const used = new Set()
  for (const panel of dashboard.panels) {
    for (const target of panel.targets) for (const name of target.expr.match(/clusterize_[a-z_]+/g)) used.add(name)
  }
  assert.ok(used.size >= 10, `the dashboard charts ${used.size} metrics`)
  const cluster = await startCluster(fixture, { env: env({ workers: 1, probes: { port: 0 } }) })
  await eventually(async () => (await cluster.stats()).workers[0].heartbeat)
  const exported = new Set((await request(cluster.probesPort, '/metrics')).body.match(/^# TYPE (clusterize_[a-z_]+)/gm).map((line) => line.slice(7)))
  for (const name of used) assert.ok(exported.has(name), `${name} is exported`)
  await cluster.stop()
})

test('the timeline shows the bus bridge coming up (and its status) when bus.redis is set', async (t) => {
  const { REDIS_URL, uniquePrefix, redisTestOptions } = require('./helpers/redis')
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const cluster = await startCluster(fixture, { env: env({ workers: 1, bus: { redis: REDIS_URL, channel: uniquePrefix('dash-bridge') }, probes: { port: 0 } }) })
  const seen = await eventually(async () => {
    const first = await hello(cluster.probesPort)
    return first.hello.events.find((e) => e.type === 'bridge-up')
  }, { what: 'a bridge-up event in the timeline' })
  assert.match(seen.channel, /dash-bridge/)
  await cluster.stop()
})
