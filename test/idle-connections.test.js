'use strict'

// Idle and half-sent connections in every scheduling mode: the app's server
// timeouts hold, idle sockets beyond maxIdleConnections are shed oldest
// first, and a worker out of file descriptors degrades instead of crashing.

const { test, after } = require('node:test')
const assert = require('node:assert')
const net = require('net')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { reusePortSupport } = require('../lib/primary/scheduling')

const fixture = path.join(__dirname, 'fixtures/idle-cluster.js')
const HALF_REQUEST = 'GET / HTTP/1.1\r\nHost: x\r\n'

after(stopAll)

/**
 * Open `count` connections that send `head` (maybe nothing) and then wait.
 * Resolves once all are connected; tracks what the server does to them.
 */
async function openIdle (port, count, head) {
  const sockets = []
  await Promise.all(Array.from({ length: count }, () => new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    const entry = { socket, closed: false, data: '', error: null }
    sockets.push(entry)
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => { entry.data += chunk })
    socket.on('error', (err) => { entry.error = err })
    socket.on('close', () => { entry.closed = true; resolve() })
    socket.on('connect', () => {
      if (head) socket.write(head)
      resolve()
    })
  })))
  return {
    sockets,
    closed: () => sockets.filter((e) => e.closed).length,
    destroy: () => { for (const e of sockets) e.socket.destroy() }
  }
}

const MODES = [
  ['rr', { scheduling: 'rr' }],
  ['sticky', { scheduling: 'sticky' }],
  ['sticky.sid', { scheduling: 'sticky', sticky: { sid: true } }],
  ['none', { scheduling: 'none' }],
  ['balanced', { scheduling: 'balanced' }],
  ['reuseport', { scheduling: 'reuseport' }],
  ['workers: 0', { workers: 0 }]
]

for (const [name, options] of MODES) {
  const skip = name === 'reuseport' && !reusePortSupport().supported ? `reuseport needs Node >= 22.12 on Linux (${process.versions.node})` : false
  test(`'${name}': the app's headersTimeout/requestTimeout close 20 half-sent requests with 408`, { skip }, async () => {
    const cluster = await startCluster(fixture, {
      env: {
        CZ_TEST_OPTIONS: JSON.stringify(Object.assign({ workers: 2 }, options)),
        CZ_SERVER: JSON.stringify({ headersTimeout: 3000, requestTimeout: 4000 })
      }
    })
    const idle = await openIdle(cluster.port, 20, HALF_REQUEST)
    try {
      await eventually(() => idle.closed() === 20, {
        timeoutMs: 30000,
        what: () => `20 half-sent requests closed by the server (${idle.closed()} were)\n--- cluster output ---\n${cluster.output}`
      })
      for (const entry of idle.sockets) assert.match(entry.data, /^HTTP\/1\.1 408 /, 'the server answered Request Timeout')
      // Still serving.
      assert.strictEqual((await cluster.get('/')).status, 200)
    } finally {
      idle.destroy()
      await cluster.stop()
    }
  })
}

test("'rr': keepAliveTimeout and server.timeout set by the app hold for handed-off connections", async () => {
  const cluster = await startCluster(fixture, {
    env: {
      CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, scheduling: 'rr' }),
      CZ_SERVER: JSON.stringify({ keepAliveTimeout: 500, timeout: 1000 })
    }
  })
  // One answered request, then silence: keepAliveTimeout. No bytes at all: server.timeout.
  const kept = await openIdle(cluster.port, 1, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
  const silent = await openIdle(cluster.port, 1, '')
  try {
    await eventually(() => kept.closed() === 1 && silent.closed() === 1, {
      timeoutMs: 20000,
      what: () => `both sockets closed by the server\n--- cluster output ---\n${cluster.output}`
    })
    assert.match(kept.sockets[0].data, /^HTTP\/1\.1 200 /)
  } finally {
    kept.destroy()
    silent.destroy()
    await cluster.stop()
  }
})

/**
 * What the primary has taken so far, from its stats: `took`, connections it handed to a worker,
 * refused, or (sticky.sid) holds or closed while they send their request line; `onTheirWay`,
 * those handed that a worker has not read yet.
 */
async function primaryTook (cluster) {
  const stats = await cluster.stats()
  const c = stats.connections
  const handed = stats.workers.reduce((sum, w) => sum + (w.connectionsHanded || 0), 0)
  return { took: handed + c.handoffShed + c.awaiting + c.awaitingShed, onTheirWay: c.handoff }
}

/**
 * With 'balanced' the workers accept themselves: what they have taken, from their heartbeats,
 * is every idle connection they hold or shed (a normal client's is neither once it closed).
 */
async function workersTook (cluster) {
  const stats = await cluster.stats()
  const took = stats.workers.reduce((sum, w) => sum + ((w.heartbeat && (w.heartbeat.idleConnections + w.heartbeat.idleShed)) || 0), 0)
  return { took, onTheirWay: 0 }
}

/**
 * openIdle() in batches, each taken by the primary (with 'balanced': by the workers) before the next is opened, so that the
 * primary and the workers see them in the order they were opened (a flood overflows the listen
 * backlog, and a client whose handshake the kernel finishes late is accepted late). The primary
 * may refuse some while too many are on their way to the workers (test/primary-connections.test.js).
 */
async function openTaken (cluster, count, head, batch = 100, scheduling = 'rr') {
  const took = scheduling === 'balanced' ? workersTook : primaryTook
  const { took: before } = await took(cluster)
  const all = { sockets: [], closed: () => all.sockets.filter((e) => e.closed).length, destroy: () => { for (const e of all.sockets) e.socket.destroy() } }
  for (let opened = 0; opened < count; opened += batch) {
    const idle = await openIdle(cluster.port, Math.min(batch, count - opened), head)
    all.sockets.push(...idle.sockets)
    let last = null
    await eventually(async () => {
      last = await took(cluster)
      return last.took >= before + all.sockets.length && last.onTheirWay === 0
    }, { timeoutMs: 30000, what: () => `the primary took ${all.sockets.length} connections (${JSON.stringify(last)})\n--- cluster output ---\n${cluster.output}` })
  }
  return all
}

/** Normal clients: `count` requests, one connection each; resolves with their statuses (or error codes). */
async function serveClients (cluster, count) {
  const results = []
  for (let i = 0; i < count; i++) {
    results.push(await cluster.get('/', { timeoutMs: 5000 }).then((r) => r.status, (err) => err.code || err.message))
  }
  return results
}

for (const scheduling of ['rr', 'balanced']) {
  test(`'${scheduling}' under ulimit -n 256: more idle sockets than the limit allows are shed oldest first; clients keep being served and no worker exits`, async () => {
    const cluster = await startCluster(fixture, {
      fdLimit: 256,
      env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, scheduling, health: { heartbeatMs: 200 } }) }
    })
    // Half of them send nothing, half a request head: both are idle until a request is whole.
    const silent = await openTaken(cluster, 400, '', 100, scheduling)
    const half = await openTaken(cluster, 400, HALF_REQUEST, 100, scheduling)
    try {
      const statuses = await serveClients(cluster, 20)
      assert.deepStrictEqual(statuses, Array(20).fill(200), 'every normal client was served')
      const stats = await eventually(async () => {
        const s = await cluster.stats()
        return s.workers.reduce((sum, w) => sum + ((w.heartbeat && w.heartbeat.idleShed) || 0), 0) > 0 ? s : null
      }, { timeoutMs: 20000, what: () => `idle connections shed, in stats\n--- cluster output ---\n${cluster.output}` })
      // Oldest first: the first 100 opened are the ones that went (each worker keeps its 128 newest).
      assert.ok(silent.sockets.slice(0, 100).every((e) => e.closed), 'the 100 oldest were closed')
      assert.ok(half.sockets.slice(-50).some((e) => !e.closed), 'some of the newest are still open')
      for (const worker of stats.workers) {
        assert.ok(worker.heartbeat.idleConnections <= 128, `worker ${worker.id} keeps at most half its 256 descriptors idle (${worker.heartbeat.idleConnections})`)
      }
      assert.deepStrictEqual(cluster.events.filter((e) => e.event === 'worker:exit'), [], 'no worker exited')
      assert.match(cluster.output, /idle connections: closing those that never sent a request first, then the ones idle the longest/)
    } finally {
      silent.destroy()
      half.destroy()
      await cluster.stop()
    }
  })
}

for (const scheduling of ['rr', 'balanced']) {
  test(`'${scheduling}': a worker out of file descriptors (maxIdleConnections above the limit) keeps running, says so once and in stats, and serves again once they are back`, async () => {
    const cluster = await startCluster(fixture, {
      fdLimit: 256,
      env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, scheduling, maxIdleConnections: 100000, health: { heartbeatMs: 200 }, probes: { port: 0 } }) }
    })
    // 'rr': in batches the worker takes before the next, so all 400 reach it, none refused by the primary.
    // 'balanced': the worker accepts from the kernel's queue until it has no descriptor left.
    const idle = scheduling === 'rr' ? await openTaken(cluster, 400, '', 50) : await openIdle(cluster.port, 400, '')
    try {
      await eventually(async () => {
        const s = await cluster.stats()
        return s.workers.some((w) => w.heartbeat && w.heartbeat.fdExhausted)
      }, { timeoutMs: 20000, what: () => `a heartbeat saying fdExhausted\n--- cluster output ---\n${cluster.output}` })
      const metrics = await cluster.probe('/metrics')
      assert.match(metrics.body, /clusterize_worker_fd_exhausted\{[^}]*\} 1/)
      assert.strictEqual(cluster.output.match(/out of file descriptors/g).length, 1, 'logged once')
      idle.destroy()
      await eventually(async () => {
        const s = await cluster.stats()
        return s.workers.every((w) => w.heartbeat && !w.heartbeat.fdExhausted)
      }, { timeoutMs: 20000, what: () => `fdExhausted cleared\n--- cluster output ---\n${cluster.output}` })
      assert.deepStrictEqual(await serveClients(cluster, 5), Array(5).fill(200))
      assert.deepStrictEqual(cluster.events.filter((e) => e.event === 'worker:exit'), [], 'no worker exited')
    } finally {
      idle.destroy()
      await cluster.stop()
    }
  })
}

test("'sticky.sid' under ulimit -n 256: silent sockets the primary holds for their request line are shed oldest first; clients keep being served", async () => {
  const cluster = await startCluster(fixture, {
    fdLimit: 256,
    env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2, scheduling: 'sticky', sticky: { sid: true } }) }
  })
  const silent = await openTaken(cluster, 600, '')
  try {
    assert.deepStrictEqual(await serveClients(cluster, 10), Array(10).fill(200), 'every normal client was served')
    // The primary keeps its 128 newest (half of 256): the first 100 opened went.
    assert.ok(silent.sockets.slice(0, 100).every((e) => e.closed), 'the 100 oldest silent sockets were closed')
    assert.ok(silent.sockets.slice(-50).some((e) => !e.closed), 'some of the newest are still held')
    assert.deepStrictEqual(cluster.events.filter((e) => e.event === 'worker:exit'), [], 'no worker exited')
    assert.strictEqual(cluster.output.match(/have not sent their request line: closing the oldest/g).length, 1, 'logged once')
  } finally {
    silent.destroy()
    await cluster.stop()
  }
})

/** A raw keep-alive client: each ask() sends a GET on the same socket and resolves with the response head. */
async function keptAlive (port) {
  const socket = net.connect(port, '127.0.0.1')
  const client = { socket, closed: false, data: '' }
  socket.setEncoding('latin1')
  socket.on('error', () => {})
  socket.on('close', () => { client.closed = true })
  await new Promise((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject) })
  client.ask = async () => {
    const from = client.data.length
    socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n')
    socket.on('data', (chunk) => { client.data += chunk })
    // The fixture answers a small JSON object: the response is whole at its closing brace.
    await eventually(() => client.closed || client.data.indexOf('}', from) !== -1, { timeoutMs: 20000, what: 'a response on the kept-alive socket' })
    if (client.closed) throw new Error('the kept-alive socket was closed: ' + client.data.slice(from))
    return client.data.slice(from)
  }
  return client
}

const SHED_ORDER_MODES = [
  ['rr', {}],
  ['balanced', { scheduling: 'balanced' }],
  ['reuseport', { scheduling: 'reuseport' }],
  ['sticky', { scheduling: 'sticky' }]
]

for (const [name, options] of SHED_ORDER_MODES) {
  const skip = name === 'reuseport' && !reusePortSupport().supported ? `reuseport needs Node >= 22.12 on Linux (${process.versions.node})` : false
  test(`'${name}': with maxIdleConnections reached, a socket that never sent a request is shed before a kept-alive one that was answered`, { skip }, async () => {
    const cluster = await startCluster(fixture, {
      env: { CZ_TEST_OPTIONS: JSON.stringify(Object.assign({ workers: 1, maxIdleConnections: 3 }, options)) }
    })
    const kept = await keptAlive(cluster.port)
    const fresh = []
    try {
      assert.match(await kept.ask(), /^HTTP\/1\.1 200 /)
      // The kept-alive socket is now the one idle the longest; three silent ones make four idle.
      for (let i = 0; i < 3; i++) fresh.push(await openIdle(cluster.port, 1, ''))
      await eventually(() => fresh.some((f) => f.closed() === 1), {
        timeoutMs: 20000,
        what: () => `a silent socket shed (the kept-alive one ${kept.closed ? 'was closed' : 'is open'})\n--- cluster output ---\n${cluster.output}`
      })
      assert.strictEqual(kept.closed, false, 'the kept-alive client was not shed')
      assert.match(await kept.ask(), /^HTTP\/1\.1 200 /, 'and its next request is answered on the same socket')
      assert.strictEqual(fresh.filter((f) => f.closed() === 1).length, 1, 'one silent socket went, the oldest')
      assert.strictEqual(fresh[0].closed(), 1)
    } finally {
      kept.socket.destroy()
      for (const f of fresh) f.destroy()
      await cluster.stop()
    }
  })
}

test('WebSockets are never shed as idle: 10 open WebSockets survive 100 idle sockets against maxIdleConnections: 5', async () => {
  const WebSocket = require('ws')
  const cluster = await startCluster(path.join(__dirname, 'fixtures/ws-cluster.js'), {
    env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, maxIdleConnections: 5 }) }
  })
  // One at a time: a connection still sending its upgrade request is idle like any other.
  const sockets = []
  for (let i = 0; i < 10; i++) {
    sockets.push(await new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${cluster.port}/`)
      ws.once('message', () => resolve(ws))
      ws.once('error', reject)
    }))
  }
  const closed = []
  for (const ws of sockets) ws.once('close', () => closed.push(ws))
  const idle = await openIdle(cluster.port, 100, '')
  try {
    await eventually(() => idle.closed() >= 95, { timeoutMs: 20000, what: () => `idle sockets shed (${idle.closed()} were)` })
    // Each WebSocket still answers.
    for (const ws of sockets) {
      const echo = new Promise((resolve) => {
        if (ws.readyState !== WebSocket.OPEN) return resolve('not open')
        ws.once('message', (data) => resolve(String(data)))
        ws.once('close', () => resolve('closed'))
      })
      ws.send('ping')
      assert.strictEqual(await echo, 'ping')
    }
    assert.strictEqual(closed.length, 0, 'no WebSocket was closed')
  } finally {
    for (const ws of sockets) ws.terminate()
    idle.destroy()
    await cluster.stop()
  }
})
