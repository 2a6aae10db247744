'use strict'

/**
 * socket.io clients do not hold a draining worker: a long-polling client's
 * pending GET is answered by engine.io's own close, and a client cut half-way
 * through the upgrade to WebSocket is let go once it fails to answer the
 * Close; shutdown then completes with exit code 0, not "shutdown forced".
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { openPollingSession } = require('./helpers/polling-client')
const { connectRawWebSocket } = require('./helpers/raw-websocket')

const fixture = path.join(__dirname, 'fixtures/socketio-cluster.js')
// Long enough that a worker held to the deadline is told apart from one that was not.
const options = { workers: 1, shutdown: { timeoutMs: 8000 }, reload: { bakeMs: 0, drainTimeoutMs: 8000 } }

after(stopAll)

function start () {
  return startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify(options), CZ_SIO_TRANSPORTS: 'polling,websocket' } })
}

async function assertCleanShutdown (cluster) {
  cluster.signal('SIGTERM')
  const exit = await cluster.exit
  assert.strictEqual(exit.code, 0, cluster.output)
  assert.doesNotMatch(cluster.output, /shutdown forced/)
}

test('shutdown: a long-polling client\'s pending GET is answered with a close packet, and the worker exits 0', async () => {
  const cluster = await start()
  const session = await openPollingSession(cluster.port)
  const pending = session.poll()
  await cluster.waitInFlight(1)
  await assertCleanShutdown(cluster)
  const answer = await pending
  assert.strictEqual(answer.status, 200, String(answer.error))
  assert.ok(session.packets.includes('1'), `engine.io close packet, got ${JSON.stringify(session.packets)}`)
})

test('reload: a long-polling client does not hold the old worker to reload.drainTimeoutMs', async () => {
  const cluster = await start()
  const oldPid = (await cluster.stats()).workers[0].pid
  const session = await openPollingSession(cluster.port)
  const pending = session.poll()
  await cluster.waitInFlight(1)
  assert.strictEqual((await cluster.reload()).ok, true)
  const exit = await cluster.waitEvent('worker:exit', (d) => d.pid === oldPid)
  assert.strictEqual(exit.data.code, 0, JSON.stringify(exit.data))
  assert.doesNotMatch(cluster.output, /drain.*(deadline|timed out)|killed/i)
  assert.ok((await pending).status === 200 && session.packets.includes('1'), 'the GET got the close packet')
  await cluster.stop()
})

for (const stage of ['after the WebSocket connection opened', 'after the probe was answered']) {
  test(`shutdown: a client cut during the upgrade to WebSocket (${stage}) does not hold the worker`, async () => {
    const cluster = await start()
    const session = await openPollingSession(cluster.port)
    session.poll()
    await cluster.waitInFlight(1)
    // Never answers anything from here on, as a client whose network went away.
    const ws = await connectRawWebSocket(cluster.port, { path: session.path.replace('transport=polling', 'transport=websocket'), echoClose: false })
    if (stage === 'after the probe was answered') {
      ws.sendText('2probe')
      await eventually(() => ws.frames.some((f) => f.text === '3probe'), { what: 'the probe answer' })
    }
    await assertCleanShutdown(cluster)
    await ws.closed
    assert.deepStrictEqual(ws.closes().map((f) => f.code), [1001], 'one Close, Going Away')
  })
}

test('reload: a socket.io WebSocket client gets exactly one Close (1012) and no frame after it, while the app keeps emitting', async () => {
  const cluster = await startCluster(fixture, { env: { CZ_TEST_OPTIONS: JSON.stringify(options), CZ_SIO_TRANSPORTS: 'websocket', CZ_SIO_TICK_MS: '20' } })
  const ws = await connectRawWebSocket(cluster.port, { path: '/socket.io/?EIO=4&transport=websocket' })
  await eventually(() => ws.frames.some((f) => f.type === 'text' && f.text.startsWith('0')), { what: 'the engine.io open packet' })
  ws.sendText('40')
  await eventually(() => ws.frames.some((f) => f.type === 'text' && f.text.startsWith('42["tick"')), { what: 'the app ticking' })
  assert.strictEqual((await cluster.reload()).ok, true)
  await ws.closed
  assert.deepStrictEqual(ws.closes(), [{ type: 'close', code: 1012, reason: 'server restarting' }], JSON.stringify(ws.frames.slice(-5)))
  assert.deepStrictEqual(ws.afterFirstClose(), [])
  await cluster.stop()
})
