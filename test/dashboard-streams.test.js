'use strict'

/**
 * The dashboard's event streams cannot be used to wear the primary down: a
 * cap on open streams (503 beyond it), a per-peer rate limit on new ones
 * (429), a client that stops reading is dropped once its unsent bytes pass
 * the bound, and the first message is small (the history is a separate GET).
 * The dashboard runs on a real probes server on loopback, fed by a stats()
 * source and lifecycle events emitted here.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { EventEmitter } = require('events')
const http = require('http')
const net = require('net')
const path = require('path')
const { createDashboard } = require('../lib/dashboard')
const { startProbes } = require('../lib/primary/probes')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const open = []

after(async () => {
  for (const server of open) await server.close()
  await stopAll()
})

function fakeStats () {
  const workers = []
  for (let id = 0; id < 8; id++) {
    workers.push({ id, pid: 1000 + id, generation: 1, state: 'ready', uptimeMs: 1000, restarts: 0, connectionsHanded: 3, heartbeat: { rss: 5e7, heapUsed: 2e7, eventLoopDelayP99Ms: 1.5, eventLoopUtilization: 0.1, inFlight: 0, served: 10, poolQueue: 0, webSockets: 0 } })
  }
  return { scheduling: 'rr', generation: 1, reloads: 0, crashLooping: false, shuttingDown: false, workers }
}

async function startDashboard (limits) {
  const handle = new EventEmitter()
  const probes = Object.assign({ port: 0, host: '127.0.0.1' }, limits)
  const dashboard = createDashboard({ probes, intervalMs: 1000, stats: fakeStats, handle, reload: async () => ({ ok: true }) })
  const server = await startProbes(probes, { stats: fakeStats, metrics: null, isLive: () => true, isReady: () => true, degradation: () => null, dashboard })
  open.push(server)
  return { handle, dashboard, port: server.port, server }
}

/** Open an event stream; resolves with the status and, for a 200, the hello and the request. */
function openStream (port, localAddress) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/dashboard/events', agent: false, localAddress }, (res) => {
      if (res.statusCode !== 200) {
        let body = ''
        res.on('data', (chunk) => { body += chunk })
        res.on('end', () => resolve({ status: res.statusCode, retryAfter: res.headers['retry-after'], body }))
        return
      }
      let buffer = ''
      res.setEncoding('utf8')
      res.on('data', function untilHello (chunk) {
        buffer += chunk
        const end = buffer.indexOf('\n\n')
        if (end === -1) return
        res.removeListener('data', untilHello)
        res.resume()
        resolve({ status: 200, req, res, helloBytes: Buffer.byteLength(buffer.slice(0, end + 2)), hello: JSON.parse(/^data: (.*)$/m.exec(buffer.slice(0, end))[1]) })
      })
    })
    req.on('error', reject)
  })
}

function emitExits (handle, count) {
  for (let i = 0; i < count; i++) {
    handle.emit('worker:exit', { id: i % 8, pid: 2000 + i, generation: 1, reason: 'crash: ' + 'x'.repeat(2000), code: 1, signal: null })
  }
}

test('more streams than probes.maxStreams get 503 with Retry-After; a closed one frees its place', async () => {
  const { dashboard, port } = await startDashboard({ maxStreams: 2 })
  const first = await openStream(port)
  const second = await openStream(port)
  assert.strictEqual(first.status, 200)
  assert.strictEqual(second.status, 200)
  const third = await openStream(port)
  assert.strictEqual(third.status, 503)
  assert.strictEqual(third.retryAfter, '10')
  assert.match(third.body, /too many open dashboards \(probes\.maxStreams is 2\)/)
  assert.strictEqual(dashboard.clients, 2)
  first.req.destroy()
  await eventually(() => dashboard.clients === 1, { timeoutMs: 5000, what: 'the closed stream to be forgotten' })
  const again = await openStream(port)
  assert.strictEqual(again.status, 200)
  second.req.destroy()
  again.req.destroy()
})

test('one peer cannot take every slot: past probes.maxStreamsPerPeer it gets 429 while another peer still gets a stream', async () => {
  const { dashboard, port } = await startDashboard({ maxStreams: 4, maxStreamsPerPeer: 2 })
  const mine = [await openStream(port), await openStream(port)]
  for (const stream of mine) assert.strictEqual(stream.status, 200)
  // Its third is refused for its own limit, before it could reach the shared cap.
  for (let i = 0; i < 3; i++) {
    const refused = await openStream(port)
    assert.strictEqual(refused.status, 429)
    assert.match(refused.body, /too many open dashboards from 127\.0\.0\.1 \(probes\.maxStreamsPerPeer is 2\)/)
  }
  assert.strictEqual(dashboard.clients, 2)
  // Another peer (another loopback address) still has room under the cap.
  const other = await openStream(port, '127.0.0.2')
  assert.strictEqual(other.status, 200)
  assert.strictEqual(dashboard.clients, 3)
  mine[0].req.destroy()
  await eventually(() => dashboard.clients === 2, { timeoutMs: 5000, what: 'the closed stream to be forgotten' })
  const again = await openStream(port)
  assert.strictEqual(again.status, 200, 'a closed stream gives its peer the place back')
  for (const stream of [mine[1], other, again]) stream.req.destroy()
})

test('new streams from one peer beyond probes.streamsPerMinute get 429', async () => {
  const { port } = await startDashboard({ streamsPerMinute: 3 })
  for (let i = 0; i < 3; i++) {
    const stream = await openStream(port)
    assert.strictEqual(stream.status, 200, `stream ${i + 1}`)
    stream.req.destroy()
  }
  const refused = await openStream(port)
  assert.strictEqual(refused.status, 429)
  assert.ok(Number(refused.retryAfter) >= 1 && Number(refused.retryAfter) <= 60, refused.retryAfter)
  assert.match(refused.body, /too many new dashboard streams from 127\.0\.0\.1 \(probes\.streamsPerMinute is 3\)/)
})

test('a client that stops reading is dropped once its unsent bytes pass probes.streamBufferBytes; a reading one stays', async () => {
  const { handle, dashboard, port } = await startDashboard({ streamBufferBytes: 64 * 1024 })
  const reader = await openStream(port)
  let readBytes = 0
  reader.res.on('data', (chunk) => { readBytes += chunk.length })

  // A raw client that sends its request and never reads a byte.
  const stalled = net.connect(port, '127.0.0.1')
  await new Promise((resolve) => stalled.once('connect', resolve))
  stalled.pause()
  stalled.write(`GET /dashboard/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)
  await eventually(() => dashboard.clients === 2, { timeoutMs: 5000, what: 'both streams open' })

  // Lifecycle events until the kernel buffers are full and the bound is passed (bounded: ~60 MB at most).
  let sent = 0
  // Small bursts (about 12 KB): the reader, in this process, reads between them.
  while (dashboard.clients === 2 && sent < 100000) {
    emitExits(handle, 20)
    sent += 20
    await new Promise((resolve) => setImmediate(resolve))
  }
  assert.strictEqual(dashboard.clients, 1, `one stream was dropped (after ${sent} events)`)
  assert.strictEqual(dashboard.streams.evicted, 1, 'the stalled one, for not reading')
  await eventually(() => readBytes > 0, { timeoutMs: 5000, what: 'the reader to get data' })
  const closed = new Promise((resolve) => stalled.once('close', resolve))
  stalled.resume() // drain what the kernel holds, then see the end
  await closed
  reader.req.destroy()
})

test('the first message is small whatever the history; the page gets the history from /dashboard/history', async () => {
  const { handle, port } = await startDashboard({})
  emitExits(handle, 250)
  handle.emit('crashloop', { generation: 1, crashes: 5, lastError: 'E'.repeat(100000) })
  const stream = await openStream(port)
  assert.ok(stream.helloBytes < 16 * 1024, `hello is ${stream.helloBytes} bytes`)
  assert.strictEqual(stream.hello.events.length, 10)
  assert.ok(stream.hello.events.every((e) => JSON.stringify(e).length < 1024), 'worker text is cut')
  stream.req.destroy()
  const history = await new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/dashboard/history', agent: false }, (res) => {
      let body = ''
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve(JSON.parse(body)))
    }).on('error', reject)
  })
  assert.strictEqual(history.events.length, 200)
  assert.strictEqual(history.events[199].type, 'crashloop')
  assert.ok(history.snapshots.length >= 1)
})

test('probes.maxStreams reaches the dashboard of a real cluster', async () => {
  const cluster = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, probes: { port: 0, maxStreams: 1 } }) } })
  const first = await openStream(cluster.probesPort)
  assert.strictEqual(first.status, 200)
  assert.strictEqual(first.hello.controls, false)
  assert.strictEqual((await openStream(cluster.probesPort)).status, 503)
  first.req.destroy()
  await cluster.stop()
})

/** GET a dashboard path from one peer; resolves with the status, Retry-After and body. */
function getPath (port, urlPath) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: urlPath, agent: false }, (res) => {
      let body = ''
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode, retryAfter: res.headers['retry-after'], body }))
    }).on('error', reject)
  })
}

test('history requests from one peer beyond probes.streamsPerMinute get 429 and are counted', async () => {
  const { dashboard, port } = await startDashboard({ streamsPerMinute: 3 })
  for (let i = 0; i < 3; i++) assert.strictEqual((await getPath(port, '/dashboard/history')).status, 200, `history ${i + 1}`)
  const refused = await getPath(port, '/dashboard/history')
  assert.strictEqual(refused.status, 429)
  assert.ok(Number(refused.retryAfter) >= 1 && Number(refused.retryAfter) <= 60, refused.retryAfter)
  assert.match(refused.body, /too many dashboard history requests from 127\.0\.0\.1 \(probes\.streamsPerMinute is 3\)/)
  // Its own budget: the streams of that peer are not used up by history requests.
  const stream = await openStream(port)
  assert.strictEqual(stream.status, 200)
  stream.req.destroy()
  assert.strictEqual(dashboard.streams.historyRefused, 1)
})

test("a real cluster's /stats and /metrics carry the dashboard's stream counters", async () => {
  const cluster = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, probes: { port: 0, maxStreams: 1, streamsPerMinute: 2 } }) } })
  const first = await openStream(cluster.probesPort)
  assert.strictEqual(first.status, 200)
  assert.strictEqual((await openStream(cluster.probesPort)).status, 503)
  for (let i = 0; i < 3; i++) await getPath(cluster.probesPort, '/dashboard/history')
  const stats = await cluster.stats()
  assert.deepStrictEqual(stats.dashboard, { open: 1, evicted: 0, refused: 1, historyRefused: 1 })
  const metrics = (await cluster.probe('/metrics')).body
  assert.match(metrics, /^clusterize_dashboard_streams 1$/m)
  assert.match(metrics, /^clusterize_dashboard_streams_evicted_total 0$/m)
  assert.match(metrics, /^clusterize_dashboard_refused_total\{request="stream"\} 1$/m)
  assert.match(metrics, /^clusterize_dashboard_refused_total\{request="history"\} 1$/m)
  first.req.destroy()
  await cluster.stop()
})
