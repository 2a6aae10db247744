'use strict'

/**
 * The dashboard on the probes server: token rules over plain HTTP, then the
 * page itself in headless Chromium (Debian's `chromium`, driven by
 * playwright-core): one row per worker, charts with data, a reload and a
 * killed worker in the timeline, data that keeps flowing; then the page as a
 * person sees it at 1100 px, at 390 px and in a dark colour scheme (every
 * column readable, axes and a legend on each chart). Screenshots of the
 * three go to a temp dir; UPDATE_SCREENSHOTS=1 writes them to docs/images/
 * (the README shows them).
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
const DOCS_IMAGES = path.join(__dirname, '..', 'docs', 'images')
/** Each screenshot in docs/images stays small enough to ship and to load fast. */
const SCREENSHOT_BUDGET = 150 * 1024

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

/**
 * The dashboard of the probes server at `port` in headless Chromium (Debian's, driven by
 * playwright-core), 1100 px wide; the browser closes after the test.
 * @returns {Promise<{ page: object, errors: string[] }>} errors: what the page threw
 */
async function openDashboard (t, port) {
  assert.ok(fs.existsSync(CHROMIUM), `Chromium is needed at ${CHROMIUM} (apt-get install chromium; .ci/run installs it)`)
  const { chromium } = require('playwright-core')
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run']
  })
  t.after(() => browser.close())
  const page = await browser.newPage({ viewport: { width: 1100, height: 800 } })
  const errors = []
  page.on('pageerror', (err) => errors.push(err.message))
  await page.goto(`http://127.0.0.1:${port}/dashboard`)
  return { page, errors }
}

test('the page in headless Chromium: a row per worker, charts drawn, a reload and a crash in the timeline, data flowing', async (t) => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, health: { heartbeatMs: 250 }, reload: { bakeMs: 200 }, probes: { port: 0 } }) })
  const { page, errors } = await openDashboard(t, cluster.probesPort)
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

  // The screenshots show every slot running again, and (when they are for the docs) a minute of steady traffic.
  const load = process.env.UPDATE_SCREENSHOTS ? traffic(cluster, page) : null
  if (load) {
    t.after(load.stop)
    await load.spanned(60000)
  }
  await page.waitForFunction(() => Array.from(document.querySelectorAll('#workers tr')).every((tr) => tr.children[3].textContent === 'ready' && tr.children[6].textContent !== '-'), null, { timeout: 15000 })

  const dir = process.env.UPDATE_SCREENSHOTS ? DOCS_IMAGES : fs.mkdtempSync(path.join(os.tmpdir(), 'cz-dashboard-'))
  if (!process.env.UPDATE_SCREENSHOTS) t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  const shoot = async (name, options) => {
    const file = path.join(dir, name)
    await page.screenshot(Object.assign({ path: file }, options))
    const size = fs.statSync(file).size
    assert.ok(size > 10000, `${name} has content (${size} bytes)`)
    assert.ok(size <= SCREENSHOT_BUDGET, `${name} is ${size} bytes, over the ${SCREENSHOT_BUDGET} budget`)
  }

  // 1100 px, a laptop: every column header is whole and inside the table's box, no sideways scroll.
  let view = await layout(page)
  assert.ok(view.pageOverflow <= 1, `1100 px: the page does not scroll sideways (${view.pageOverflow}px)`)
  assert.deepStrictEqual(view.cutHeaders, [], '1100 px: every column header is fully visible')
  assert.ok(view.box.scrollWidth <= view.box.clientWidth + 1, `1100 px: all columns fit (${view.box.scrollWidth} > ${view.box.clientWidth})`)
  assertCharts(view, ['worker 0', 'worker 1'], '1100 px')
  await shoot('dashboard.png', { fullPage: true })

  await page.emulateMedia({ colorScheme: 'dark' })
  view = await layout(page)
  assert.ok(view.colors.background < 0.1, `dark: a dark background (luminance ${view.colors.background})`)
  assert.ok(view.colors.text > 0.6, `dark: light text (luminance ${view.colors.text})`)
  assert.ok(view.colors.header > 0.3, `dark: readable column headers (luminance ${view.colors.header})`)
  assert.ok(view.colors.lines.every((l) => l > 0.15), `dark: every chart line stands out from the background (${view.colors.lines})`)
  assertCharts(view, ['worker 0', 'worker 1'], 'dark')
  await shoot('dashboard-dark.png', { fullPage: true })
  await page.emulateMedia({ colorScheme: 'light' })
  view = await layout(page)
  assert.ok(view.colors.background > 0.9 && view.colors.text < 0.1, 'light again')

  // 390 px, a phone: the page keeps its width; the table scrolls inside its own box, to its last column.
  await page.setViewportSize({ width: 390, height: 844 })
  view = await layout(page)
  assert.ok(view.pageOverflow <= 1, `390 px: the page does not scroll sideways (${view.pageOverflow}px); the table scrolls inside its box`)
  assert.ok(['auto', 'scroll'].includes(view.box.overflowX), `390 px: the table's box scrolls (overflow-x ${view.box.overflowX})`)
  assert.ok(view.box.right <= 390, `390 px: the table's box ends inside the screen (${view.box.right})`)
  assert.ok(view.figures.every((f) => f.right <= 390), '390 px: every chart fits the screen')
  assertCharts(view, ['worker 0', 'worker 1'], '390 px')
  await shoot('dashboard-phone.png')
  await page.evaluate(() => { const box = document.querySelector('table').parentElement; box.scrollLeft = box.scrollWidth })
  view = await layout(page)
  assert.deepStrictEqual(view.cutHeaders.filter((h) => h.index > 0 && h.index >= view.headerCount - 3), [], '390 px: scrolled to its end, the last columns are whole')
  if (load) await load.stop()
  assert.deepStrictEqual(errors, [])
  await cluster.stop()
})

test('a page opened after a reload, a kill -9 and a stalled primary shows them: the last 5 minutes are kept in the primary, a gap is drawn as a gap', async (t) => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2, health: { heartbeatMs: 250, heartbeatTimeoutMs: 20000 }, reload: { bakeMs: 200 }, probes: { port: 0 } }) })
  for (let i = 0; i < 20; i++) await cluster.get('/')
  // Everything below happens with no page open.
  cluster.signal('SIGUSR2')
  await eventually(async () => (await cluster.stats()).generation === 2 && (await cluster.stats()).workers.every((w) => w.state === 'ready'), { timeoutMs: 30000, what: 'the reload to commit' })
  const victim = (await cluster.stats()).workers.find((w) => w.id === 1)
  process.kill(victim.pid, 'SIGKILL')
  await eventually(async () => (await cluster.stats()).workers.filter((w) => w.state === 'ready').length === 2, { timeoutMs: 30000, what: 'worker 1 back' })
  // The primary stopped for 2 s (8 sampling intervals): the charts must show a hole there.
  process.kill(cluster.pid, 'SIGSTOP')
  try {
    await new Promise((resolve) => setTimeout(resolve, 2000))
  } finally {
    process.kill(cluster.pid, 'SIGCONT')
  }
  await eventually(async () => (await cluster.stats()).workers.every((w) => w.heartbeat), { what: 'heartbeats after the stop' })
  await new Promise((resolve) => setTimeout(resolve, 1000))

  const { page, errors } = await openDashboard(t, cluster.probesPort)
  await page.waitForSelector('#timeline li[data-type="reload-done"]', { timeout: 15000 })
  await page.waitForSelector('#timeline li[data-type="worker-exit"]', { timeout: 15000 })
  const seen = await page.evaluate(() => ({
    badge: document.getElementById('generation').textContent,
    rssPoints: Number(document.getElementById('chart-rss').dataset.points),
    // Lines per series: a series with a hole in its samples is drawn in more than one piece.
    piecesPerSeries: Array.from(document.querySelectorAll('#chart-rss polyline')).reduce((count, line) => {
      const name = line.querySelector('title').textContent
      count[name] = (count[name] || 0) + 1
      return count
    }, {}),
    xLabels: Array.from(document.querySelectorAll('#chart-rss .x-axis text'), (el) => el.textContent)
  }))
  assert.match(seen.badge, /generation 2 \u00b7 1 reload( \u00b7|$)/, 'one reload is "1 reload"')
  // The page opened after the stop: a series drawn in two pieces holds samples from both
  // sides of it, so from before the page opened. How many there are depends on how fast
  // the reload and the respawn went (one snapshot per 500 ms), not on the page.
  const series = Object.keys(seen.piecesPerSeries).length
  assert.ok(series >= 2 && seen.rssPoints >= 2 * series, `the charts hold what was sampled before the page opened (${seen.rssPoints} points in ${series} series)`)
  assert.ok(Object.values(seen.piecesPerSeries).some((pieces) => pieces >= 2), `the 2 s stop is a gap, not a diagonal: ${JSON.stringify(seen.piecesPerSeries)}`)
  const units = new Set(seen.xLabels.filter((label) => label !== 'now').map((label) => label.split(' ')[1]))
  assert.ok(units.size <= 1, `one unit on the time axis: ${seen.xLabels}`)
  assert.deepStrictEqual(errors, [])
  await cluster.stop()
})

/**
 * Requests at a modest pace, for the docs' screenshots only, until stop();
 * `spanned(ms)` resolves once the page's charts cover that much time.
 */
function traffic (cluster, page) {
  let running = true
  const done = (async () => {
    for (let i = 0; running && i < 100000; i++) {
      await Promise.all([cluster.get('/'), cluster.get('/'), cluster.get('/')]).catch(() => {})
      await new Promise((resolve) => setTimeout(resolve, 20 + 30 * Math.abs(Math.sin(i / 40))))
    }
  })()
  return {
    spanned: (ms) => page.waitForFunction((label) => Array.from(document.querySelectorAll('#chart-rps .x-axis text'), (el) => el.textContent).includes(label),
      '-' + ms / 60000 + ' min', { timeout: ms + 60000 }),
    stop: () => { running = false; return done }
  }
}

/**
 * What a person sees: sideways overflow of the page, the table's box, the
 * column headers not fully visible inside it (cut by the box or by their own
 * width), each chart's axis labels and legend, and the colours in use as
 * relative luminance (0 black, 1 white).
 */
async function layout (page) {
  // Charts are drawn at their width: look after the next snapshot has redrawn everything.
  const before = await page.textContent('#status')
  await page.waitForFunction((text) => document.getElementById('status').textContent !== text, before, { timeout: 10000 })
  return page.evaluate(() => {
    const luminance = (color) => {
      const [r, g, b] = color.match(/[\d.]+/g).slice(0, 3).map((c) => {
        const v = Number(c) / 255
        return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4)
      })
      return 0.2126 * r + 0.7152 * g + 0.0722 * b
    }
    const boxEl = document.querySelector('table').parentElement
    const box = boxEl.getBoundingClientRect()
    const headers = Array.from(document.querySelectorAll('thead th'))
    const cutHeaders = headers.map((th, index) => {
      const r = th.getBoundingClientRect()
      return { index, text: th.textContent, left: r.left, right: r.right, overflows: th.scrollWidth > th.clientWidth }
    }).filter((h) => h.left < box.left - 0.5 || h.right > box.right + 0.5 || h.overflows)
    const figures = Array.from(document.querySelectorAll('.charts figure')).map((figure) => {
      const svg = figure.querySelector('svg')
      const inside = (el) => {
        const r = el.getBoundingClientRect()
        const f = figure.getBoundingClientRect()
        return r.left >= f.left - 0.5 && r.right <= f.right + 0.5 && r.top >= f.top - 0.5 && r.bottom <= f.bottom + 0.5
      }
      const labels = Array.from(svg.querySelectorAll('text'))
      return {
        id: svg.id,
        right: figure.getBoundingClientRect().right,
        yLabels: Array.from(svg.querySelectorAll('.y-axis text'), (el) => el.textContent),
        xLabels: Array.from(svg.querySelectorAll('.x-axis text'), (el) => el.textContent),
        labelsInside: labels.every(inside),
        legend: Array.from(figure.querySelectorAll('.legend li'), (li) => ({ series: li.dataset.series, text: li.textContent, visible: inside(li) && li.getBoundingClientRect().width > 0 })),
        lines: Array.from(svg.querySelectorAll('polyline'), (line) => ({ series: line.querySelector('title').textContent, stroke: getComputedStyle(line).stroke }))
      }
    })
    const background = luminance(getComputedStyle(document.body).backgroundColor)
    return {
      pageOverflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
      box: { overflowX: getComputedStyle(boxEl).overflowX, scrollWidth: boxEl.scrollWidth, clientWidth: boxEl.clientWidth, right: box.right },
      headerCount: headers.length,
      cutHeaders,
      figures,
      colors: {
        background,
        text: luminance(getComputedStyle(document.body).color),
        header: luminance(getComputedStyle(headers[0]).color),
        // Contrast of each chart line against the page, as a difference of luminance.
        lines: figures.flatMap((f) => f.lines.map((l) => Math.abs(luminance(l.stroke) - background)))
      }
    }
  })
}

/** Each chart has a y axis from 0, time labels ending at "now", and a legend entry per worker line. */
function assertCharts (view, workers, where) {
  assert.strictEqual(view.figures.length, 3, where)
  for (const figure of view.figures) {
    assert.ok(figure.yLabels.length >= 2 && figure.yLabels[0] === '0', `${where}: ${figure.id} has a y scale from 0 (${figure.yLabels})`)
    assert.ok(figure.xLabels.length >= 2 && figure.xLabels.includes('now'), `${where}: ${figure.id} has time labels (${figure.xLabels})`)
    assert.ok(figure.labelsInside, `${where}: ${figure.id}'s axis labels are inside its box`)
    const expected = figure.id === 'chart-rps' ? workers.concat('total') : workers
    assert.deepStrictEqual(figure.legend.map((l) => l.series), expected, `${where}: ${figure.id} has a legend entry per line`)
    assert.ok(figure.legend.every((l) => l.visible && l.text.startsWith(l.series)), `${where}: ${figure.id}'s legend is visible and named`)
    // A series with a gap in its samples (a worker restarting) is drawn in several pieces.
    assert.deepStrictEqual([...new Set(figure.lines.map((l) => l.series))].sort(), expected.slice().sort(), `${where}: ${figure.id} draws the lines its legend names`)
    const strokeOf = new Map(figure.lines.map((l) => [l.series, l.stroke]))
    assert.ok(figure.lines.every((l) => l.stroke === strokeOf.get(l.series)), `${where}: ${figure.id}: the pieces of one line share its colour`)
    assert.strictEqual(new Set(strokeOf.values()).size, strokeOf.size, `${where}: ${figure.id}'s lines have distinct colours`)
  }
}

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
