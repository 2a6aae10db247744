'use strict'

/**
 * WebSockets with a stock `ws` server: counted in heartbeats, and closed
 * with a proper close frame (1012 on reload, 1001 on shutdown, never 1006)
 * once the replacement is ready; an onDrain hook speaks first.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const WebSocket = require('ws')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')

const fixture = path.join(__dirname, 'fixtures/ws-cluster.js')
const env = (options, extra) => Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options) }, extra)

after(stopAll)

/** Connect and collect messages and the close code. */
function connect (port) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/`)
  const client = { ws, messages: [], closed: null }
  client.opened = new Promise((resolve, reject) => {
    ws.once('open', resolve)
    ws.once('error', reject)
  })
  client.greeted = new Promise((resolve) => {
    ws.on('message', (data) => {
      const message = JSON.parse(String(data))
      client.messages.push(message)
      if (message.hello) resolve(message)
    })
  })
  client.closed = new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: String(reason) })))
  return client
}

for (const scheduling of ['rr', 'none']) {
  test(`'${scheduling}': a reload closes each WebSocket with 1012 after the new worker is ready; reconnecting lands on the new generation`, async () => {
    const cluster = await startCluster(fixture, { env: env({ workers: 1, scheduling, health: { heartbeatMs: 100 }, reload: { bakeMs: 0 } }) })
    const client = connect(cluster.port)
    const hello = await client.greeted
    assert.strictEqual(hello.generation, 1)
    await eventually(async () => (await cluster.stats()).workers[0].heartbeat.webSockets === 1)
    const reloaded = cluster.reload()
    const closed = await client.closed
    assert.strictEqual(closed.code, 1012, JSON.stringify(closed))
    const ready = cluster.events.find((e) => e.event === 'worker:ready' && e.data.generation === 2)
    assert.ok(ready, 'the replacement was ready before the close')
    const again = connect(cluster.port)
    const second = await again.greeted
    assert.strictEqual(second.generation, 2)
    assert.notStrictEqual(second.hello, hello.hello)
    assert.strictEqual((await reloaded).ok, true)
    again.ws.close()
    await again.closed
    await cluster.stop()
  })
}

test('shutdown closes WebSockets with 1001, after the onDrain hook said goodbye', async () => {
  const cluster = await startCluster(fixture, { env: env({ workers: 2 }, { CZ_WS_GOODBYE: '1' }) })
  const clients = [connect(cluster.port), connect(cluster.port)]
  await Promise.all(clients.map((c) => c.greeted))
  cluster.signal('SIGTERM')
  for (const client of clients) {
    const closed = await client.closed
    assert.strictEqual(closed.code, 1001, JSON.stringify(closed))
    assert.deepStrictEqual(client.messages.filter((m) => m.goodbye), [{ goodbye: 'shutdown' }])
  }
  assert.strictEqual((await cluster.exit).code, 0)
})
