'use strict'

/**
 * What the primary holds itself in 'rr' and 'sticky' scheduling is bounded
 * by maxIdleConnections and counted in /stats and /metrics: connections
 * waiting for a ready worker (the newest refused beyond the bound, logged
 * once) and, with sticky.sid, connections still sending their request line
 * (the oldest closed). Connections on their way to a worker that is not
 * taking them are bounded by half the primary's open-file limit (the newest
 * refused), so a flood cannot run the primary out of descriptors. Real
 * clusters, HTTP on loopback.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const net = require('net')
const os = require('os')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-primary-conns-'))

after(async () => {
  await stopAll()
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** Open `count` connections that each send `head` and collect what comes back until they close. */
async function openClients (port, count, head, localAddress) {
  const sockets = await Promise.all(Array.from({ length: count }, () => new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1', localAddress })
    const entry = { socket, closed: false, data: '' }
    socket.setEncoding('latin1')
    socket.on('data', (chunk) => { entry.data += chunk })
    socket.on('error', () => {})
    socket.on('close', () => { entry.closed = true })
    socket.on('connect', () => {
      if (head) socket.write(head)
      resolve(entry)
    })
    socket.on('close', () => resolve(entry))
  })))
  return {
    sockets,
    closed: () => sockets.filter((e) => e.closed).length,
    destroy: () => { for (const e of sockets) e.socket.destroy() }
  }
}

/** The value of one sample line in a Prometheus exposition. */
function sample (text, line) {
  const found = text.split('\n').find((l) => l.startsWith(line + ' '))
  return found === undefined ? undefined : Number(found.slice(line.length + 1))
}

test("'rr': connections waiting for a ready worker are bounded by maxIdleConnections; the newest are refused, counted in /stats and /metrics, logged once", async () => {
  const hold = path.join(tmp, 'hold')
  const cluster = await startCluster(fixture, {
    env: { CZ_BOOT_HOLD_FILE: hold, CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, scheduling: 'rr', maxIdleConnections: 20, probes: { port: 0 } }) }
  })
  // The only worker crashes; its replacement stays in boot until the file goes.
  fs.writeFileSync(hold, '')
  const crashed = (await cluster.get('/crash')).json.pid
  await cluster.waitEvent('worker:exit', (d) => d.pid === crashed)
  const clients = await openClients(cluster.port, 30, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  try {
    const connections = await eventually(async () => {
      const stats = await cluster.stats()
      return stats.connections && stats.connections.pending + stats.connections.pendingShed === 30 && stats.connections
    }, { what: () => '30 connections held or refused\n' + cluster.output })
    assert.deepStrictEqual(connections, { pending: 20, pendingShed: 10, awaiting: 0, awaitingShed: 0, handoff: 0, handoffShed: 0 })
    const metrics = (await cluster.probe('/metrics')).body
    assert.strictEqual(sample(metrics, 'clusterize_primary_held_connections{queue="pending"}'), 20)
    assert.strictEqual(sample(metrics, 'clusterize_primary_connections_shed_total{queue="pending"}'), 10)
    assert.strictEqual(cluster.output.match(/connections are waiting for a ready worker: refusing new ones/g).length, 1, 'logged once')

    // A worker is ready: every connection that waited is served, the refused ones got nothing.
    fs.rmSync(hold)
    await eventually(() => clients.closed() === 30, { what: () => 'every client answered or closed\n' + cluster.output })
    const answered = clients.sockets.filter((e) => e.data.startsWith('HTTP/1.1 200')).length
    assert.strictEqual(answered, 20)
    assert.strictEqual(clients.sockets.filter((e) => e.data === '').length, 10)
    assert.strictEqual((await cluster.stats()).connections.pending, 0)
  } finally {
    clients.destroy()
    fs.rmSync(hold, { force: true })
    await cluster.stop()
  }
})

test("'sticky.sid': silent connections the primary closed for maxIdleConnections are counted in /stats and /metrics", async () => {
  const cluster = await startCluster(fixture, {
    env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, scheduling: 'sticky', sticky: { sid: true }, maxIdleConnections: 16, probes: { port: 0 } }) }
  })
  const silent = await openClients(cluster.port, 40, '')
  try {
    const connections = await eventually(async () => {
      const stats = await cluster.stats()
      return stats.connections.awaiting + stats.connections.awaitingShed === 40 && stats.connections
    }, { what: () => '40 silent connections held or closed\n' + cluster.output })
    assert.deepStrictEqual(connections, { pending: 0, pendingShed: 0, awaiting: 16, awaitingShed: 24, handoff: 0, handoffShed: 0 })
    const metrics = (await cluster.probe('/metrics')).body
    assert.strictEqual(sample(metrics, 'clusterize_primary_held_connections{queue="awaiting"}'), 16)
    assert.strictEqual(sample(metrics, 'clusterize_primary_connections_shed_total{queue="awaiting"}'), 24)
    assert.strictEqual((await cluster.get('/')).status, 200, 'a normal client is served')
  } finally {
    silent.destroy()
    await cluster.stop()
  }
})

test("'rr' under ulimit -n 128: while the only worker does not take connections, at most half the primary's limit wait on their way to it; the newest are refused, counted and logged once, and the rest are served once it does", async () => {
  const cluster = await startCluster(fixture, {
    fdLimit: 128,
    env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, scheduling: 'rr', health: { heartbeatTimeoutMs: 120000 }, probes: { port: 0 } }) }
  })
  // The worker's event loop is held: it reads no handle from its channel until the file goes.
  const hold = path.join(tmp, 'handoff-hold')
  fs.writeFileSync(hold, '')
  const blocked = cluster.get(`/hold?file=${encodeURIComponent(hold)}`, { timeoutMs: 60000 })
  await eventually(() => fs.existsSync(hold + '.held'), { what: () => 'the worker holding its event loop\n' + cluster.output })
  const clients = await openClients(cluster.port, 100, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  try {
    let last = null
    const connections = await eventually(async () => {
      last = (await cluster.stats()).connections
      return last.handoff + last.handoffShed === 99 && last
    }, { what: () => `99 connections on their way or refused (${JSON.stringify(last)})\n${cluster.output}` })
    // The first is written to the worker's channel at once (Node's IPC then waits for the
    // worker's answer before it writes the next): it is the worker's, no longer the primary's.
    // ulimit -n 128: half is 64, all of it the only worker's share; the other 35 are refused.
    assert.deepStrictEqual(connections, { pending: 0, pendingShed: 0, awaiting: 0, awaitingShed: 0, handoff: 64, handoffShed: 35 })
    const metrics = (await cluster.probe('/metrics')).body
    assert.strictEqual(sample(metrics, 'clusterize_primary_held_connections{queue="handoff"}'), 64)
    assert.strictEqual(sample(metrics, 'clusterize_primary_connections_shed_total{queue="handoff"}'), 35)
    assert.strictEqual(cluster.output.match(/connections arrive faster than the workers take them: refusing new ones/g).length, 1, 'logged once')

    fs.rmSync(hold)
    assert.strictEqual((await blocked).status, 200)
    await eventually(() => clients.closed() === 100, { timeoutMs: 30000, what: () => 'every client answered or closed\n' + cluster.output })
    assert.strictEqual(clients.sockets.filter((e) => e.data.startsWith('HTTP/1.1 200')).length, 65, 'those on their way were served')
    assert.strictEqual(clients.sockets.filter((e) => e.data === '').length, 35, 'the refused ones got nothing')
    assert.strictEqual((await cluster.stats()).connections.handoff, 0)
    assert.deepStrictEqual(cluster.events.filter((e) => e.event === 'worker:exit'), [], 'no worker exited')
  } finally {
    clients.destroy()
    fs.rmSync(hold, { force: true })
    await cluster.stop()
  }
})

for (const mode of ['rr', 'sticky']) {
  test(`'${mode}' under ulimit -n 256: a flood from one address fills only its part of a stuck worker's hand-off share; clients from another address still get through`, async () => {
    const cluster = await startCluster(fixture, {
      fdLimit: 256,
      env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, scheduling: mode, health: { heartbeatTimeoutMs: 120000 }, probes: { port: 0 } }) }
    })
    const hold = path.join(tmp, `handoff-hold-peers-${mode}`)
    fs.writeFileSync(hold, '')
    const blocked = cluster.get(`/hold?file=${encodeURIComponent(hold)}`, { timeoutMs: 60000 })
    await eventually(() => fs.existsSync(hold + '.held'), { what: () => 'the worker holding its event loop\n' + cluster.output })
    const request = 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
    const flood = await openClients(cluster.port, 200, request)
    let others = null
    try {
      let last = null
      await eventually(async () => {
        last = (await cluster.stats()).connections
        return last.handoff + last.handoffShed === 199
      }, { what: () => `the flood on its way or refused (${JSON.stringify(last)})\n${cluster.output}` })
      // Half of 256 is the only worker's share; the first handle is the worker's at once.
      assert.strictEqual(last.handoff, 128, 'the flood filled the share')
      // Five clients from another loopback address: not refused for the flood's share.
      others = await openClients(cluster.port, 5, request, '127.0.0.2')
      await eventually(async () => {
        last = (await cluster.stats()).connections
        return last.handoff + last.handoffShed === 204
      }, { what: () => `the other clients on their way or refused (${JSON.stringify(last)})\n${cluster.output}` })
      assert.deepStrictEqual([last.handoff, last.handoffShed], [133, 71], 'the other address got through, the flood did not')
      fs.rmSync(hold)
      assert.strictEqual((await blocked).status, 200)
      await eventually(() => others.closed() === 5, { timeoutMs: 30000, what: () => 'the other clients answered\n' + cluster.output })
      assert.deepStrictEqual(others.sockets.map((e) => e.data.slice(0, 12)), Array(5).fill('HTTP/1.1 200'))
    } finally {
      flood.destroy()
      if (others) others.destroy()
      fs.rmSync(hold, { force: true })
      await cluster.stop()
    }
  })
}
