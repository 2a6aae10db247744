'use strict'

/**
 * The probes server's own guards, on a real cluster: a loopback probes
 * server answers only to loopback Host names (DNS rebinding), and with a
 * token /stats and /metrics ask for it unless probes.guardStats is false.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const http = require('http')
const net = require('net')
const path = require('path')
const { startCluster, stopAll, request } = require('./helpers/cluster')
const { resolveConfig } = require('../lib/config')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const env = (options) => ({ CZ_TEST_OPTIONS: JSON.stringify(options) })
const TOKEN = 'view-token-0123456789abcdef'

after(stopAll)

test('a loopback probes server refuses a foreign Host header (DNS rebinding) and answers loopback names with any port', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 1, probes: { port: 0 } }) })
  const port = cluster.probesPort
  for (const urlPath of ['/stats', '/metrics', '/live', '/dashboard', '/dashboard/events']) {
    const res = await request(port, urlPath, { headers: { Host: `evil.example:${port}` } })
    assert.strictEqual(res.status, 403, `${urlPath} with Host: evil.example`)
    assert.match(res.body, /answers only to Host: localhost/)
  }
  for (const host of ['127.attacker.example', `127.0.0.1.nip.io:${port}`, `localhost.evil.example:${port}`]) {
    assert.strictEqual((await request(port, '/stats', { headers: { Host: host } })).status, 403, host)
  }
  for (const host of [`localhost:${port}`, 'localhost', `127.0.0.1:${port}`, '127.0.0.2:1', `[::1]:${port}`]) {
    const res = await request(port, '/stats', { headers: { Host: host } })
    assert.strictEqual(res.status, 200, host)
    assert.strictEqual(res.json.workers.length, 1)
  }
  await cluster.stop()
})

test('with probes.token, /stats and /metrics need it (Bearer, as Prometheus sends it); /live and /ready stay open; guardStats: false opens them', async () => {
  const guarded = await startCluster(fixture, { env: env({ workers: 1, probes: { port: 0, token: TOKEN } }) })
  const port = guarded.probesPort
  for (const urlPath of ['/stats', '/metrics']) {
    const bare = await request(port, urlPath)
    assert.strictEqual(bare.status, 401, urlPath)
    assert.strictEqual(bare.headers['www-authenticate'], 'Bearer')
    assert.strictEqual((await request(port, urlPath, { headers: { Authorization: 'Bearer wrong-token-0123456789abcdef' } })).status, 401)
    assert.strictEqual((await request(port, urlPath + '?token=' + TOKEN)).status, 401, 'only the header: a URL token ends up in scrape logs')
    assert.strictEqual((await request(port, urlPath, { headers: { Authorization: 'Bearer ' + TOKEN } })).status, 200, urlPath)
  }
  assert.strictEqual((await request(port, '/live')).status, 200)
  assert.strictEqual((await request(port, '/ready')).status, 200)
  await guarded.stop()

  const open = await startCluster(fixture, { env: env({ workers: 1, probes: { port: 0, token: TOKEN, guardStats: false } }) })
  assert.strictEqual((await request(open.probesPort, '/stats')).status, 200)
  assert.strictEqual((await request(open.probesPort, '/metrics')).status, 200)
  assert.strictEqual((await request(open.probesPort, '/dashboard')).status, 401, 'the dashboard keeps its token')
  await open.stop()
})

test('probes options are checked at startup', () => {
  const bad = [
    [{ probes: { port: 0, guardStats: true } }, 'probes.guardStats', /needs "probes.token"/],
    [{ probes: { port: 0, token: TOKEN, guardStats: 'yes' } }, 'probes.guardStats', /true or false/],
    [{ probes: { port: 0, maxStreams: 0 } }, 'probes.maxStreams', /from 1 to/],
    [{ probes: { port: 0, streamBufferBytes: 10 } }, 'probes.streamBufferBytes', /from 1024 to/],
    [{ probes: { port: 0, streamsPerMinute: 1.5 } }, 'probes.streamsPerMinute', /integer/],
    [{ probes: { port: 0, maxStreamsPerPeer: 0 } }, 'probes.maxStreamsPerPeer', /from 1 to/],
    [{ probes: { port: 0, maxConnections: 'lots' } }, 'probes.maxConnections', /'auto' or an integer from 1 to 100000/]
  ]
  for (const [options, option, message] of bad) {
    assert.throws(() => resolveConfig(options, {}), (err) => err.name === 'ClusterizeOptionError' && err.option === option && message.test(err.message), option)
  }
  const probes = resolveConfig({ probes: { port: 0, token: TOKEN } }, {}).probes
  assert.strictEqual(probes.guardStats, true)
  assert.strictEqual(resolveConfig({ probes: { port: 0 } }, {}).probes.guardStats, false)
  assert.deepStrictEqual([probes.maxStreams, probes.maxStreamsPerPeer, probes.streamBufferBytes, probes.streamsPerMinute], [64, 8, 1048576, 60])
  // 'auto': maxStreams + 64, at most an eighth of the open-file limit (at least 16).
  const { defaultProbeConnections } = require('../lib/primary/probe-connections')
  assert.deepStrictEqual([defaultProbeConnections(64, 1048576), defaultProbeConnections(64, 1024), defaultProbeConnections(64, 256), defaultProbeConnections(64, 64), defaultProbeConnections(8, null)], [128, 128, 32, 16, 72])
  assert.strictEqual(resolveConfig({ probes: { port: 0, maxConnections: 10 } }, {}).probes.maxConnections, 10)
})

test('a probes port in use fails naming the probes port option, not a bare listen EADDRINUSE', async () => {
  const holder = net.createServer()
  await new Promise((resolve) => holder.listen(0, '127.0.0.1', resolve))
  const taken = holder.address().port
  try {
    await assert.rejects(startCluster(fixture, { env: env({ workers: 1, probes: { port: taken } }) }), (err) => {
      assert.match(err.message, new RegExp(`probes port ${taken} is already in use \\(EADDRINUSE\\)`))
      assert.match(err.message, /option "probes\.port", CLI --probes-port/)
      return true
    })
  } finally {
    await new Promise((resolve) => holder.close(resolve))
  }
})

/** Open `count` sockets to the port that send nothing; resolves once each is connected or closed. */
async function openSilent (port, count) {
  const entries = []
  await Promise.all(Array.from({ length: count }, () => new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    const entry = { socket, closed: false }
    entries.push(entry)
    socket.on('error', () => {})
    socket.on('close', () => { entry.closed = true; resolve() })
    socket.on('connect', resolve)
  })))
  return { entries, destroy: () => { for (const e of entries) e.socket.destroy() } }
}

test('under ulimit -n 256, 300 idle sockets on the probes port: the primary sheds them (probes.maxConnections auto), /ready and the app keep answering', async () => {
  const cluster = await startCluster(fixture, { fdLimit: 256, env: env({ workers: 1, probes: { port: 0 } }) })
  const flood = await openSilent(cluster.probesPort, 300)
  try {
    assert.strictEqual((await request(cluster.probesPort, '/ready')).status, 200)
    for (let i = 0; i < 20; i++) assert.strictEqual((await cluster.get('/')).status, 200, `app request ${i + 1}`)
    const stats = (await request(cluster.probesPort, '/stats')).json
    // auto: an eighth of 256.
    assert.ok(stats.probes.open <= 32, `probes connections open: ${stats.probes.open}`)
    assert.ok(stats.probes.shed + stats.probes.refused >= 300 - 32, JSON.stringify(stats.probes))
    assert.match(cluster.output, /probes server: more than 32 connections \(probes\.maxConnections\)/)
    const metrics = (await request(cluster.probesPort, '/metrics')).body
    assert.match(metrics, /^clusterize_probes_connections_closed_total\{reason="shed"\} [1-9]\d*$/m)
    assert.match(metrics, /^clusterize_log_lines_dropped_total 0$/m)
  } finally {
    flood.destroy()
    await cluster.stop()
  }
})

test('probes.maxConnections: silent sockets are shed before a kept-alive client that was answered; a body is refused with 413 and never read', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 1, probes: { port: 0, maxConnections: 10 } }) })
  const port = cluster.probesPort
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  try {
    const first = await request(port, '/live', { agent })
    assert.strictEqual(first.status, 200)
    const flood = await openSilent(port, 50)
    await eventually(() => flood.entries.filter((e) => e.closed).length >= 50 - 9, { timeoutMs: 20000, what: 'the silent sockets beyond the cap to be shed' })
    // The kept-alive socket is the one that served: its next request goes on it and is answered.
    let reused = false
    const again = await new Promise((resolve, reject) => {
      const req = http.get({ host: '127.0.0.1', port, path: '/ready', agent }, (res) => {
        reused = req.reusedSocket
        res.resume()
        res.on('end', () => resolve(res.statusCode))
      })
      req.on('error', reject)
    })
    assert.strictEqual(again, 200)
    assert.strictEqual(reused, true, 'the kept-alive socket survived the flood')
    flood.destroy()

    // 500 MB announced, 64 KB sent: the answer is 413 and the connection closes without the rest.
    const raw = net.connect(port, '127.0.0.1')
    let answer = ''
    raw.setEncoding('latin1')
    raw.on('data', (chunk) => { answer += chunk })
    raw.on('error', () => {})
    let closed = false
    raw.once('close', () => { closed = true })
    raw.write(`GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${500 * 1024 * 1024}\r\n\r\n`)
    raw.write(Buffer.alloc(64 * 1024, 'x'))
    try {
      await eventually(() => closed, { timeoutMs: 20000, what: () => `the connection to close after the answer (got: ${JSON.stringify(answer.slice(0, 60))})` })
    } finally {
      raw.destroy()
    }
    assert.match(answer, /^HTTP\/1\.1 413 /)
    const stats = (await request(port, '/stats')).json
    assert.strictEqual(stats.probes.bodyRefused, 1)
    assert.ok(stats.probes.shed >= 40, JSON.stringify(stats.probes))
  } finally {
    agent.destroy()
    await cluster.stop()
  }
})
