'use strict'

/**
 * lib/realtime/socketio-internals.js: each private access answers with its
 * fallback, not a throw, when the field is not where it was (another
 * version of socket.io, engine.io or ws); and finds it where it is.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const internals = require('../lib/realtime/socketio-internals')

test('webSocketOfSocket: finds the ws WebSocket on a socket ws took, null on any other', async () => {
  const http = require('http')
  const { WebSocketServer, WebSocket } = require('ws')
  const server = http.createServer()
  const wss = new WebSocketServer({ server })
  const accepted = new Promise((resolve) => wss.once('connection', (ws, req) => resolve({ ws, socket: req.socket })))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const client = new WebSocket(`ws://127.0.0.1:${server.address().port}/`)
  await new Promise((resolve, reject) => { client.once('open', resolve); client.once('error', reject) })
  const { ws, socket } = await accepted
  assert.strictEqual(internals.webSocketOfSocket(socket), ws)
  assert.strictEqual(internals.webSocketOfSocket({}), null)
  assert.strictEqual(internals.webSocketOfSocket({ [Symbol('websocket')]: { close: 1 } }), null, 'shape checked')
  assert.strictEqual(internals.webSocketOfSocket(null), null)
  const closed = new Promise((resolve) => client.once('close', resolve))
  client.terminate()
  await closed
  wss.close()
  await new Promise((resolve) => server.close(resolve))
})

test('engine.io transports: no ws or TCP socket where expected means no corking, no send to wrap means nothing wrapped', () => {
  assert.strictEqual(internals.tcpSocketOfTransport({}), null)
  assert.strictEqual(internals.tcpSocketOfTransport({ socket: { _socket: {} } }), null)
  const tcp = { cork () {}, uncork () {} }
  assert.strictEqual(internals.tcpSocketOfTransport({ socket: { _socket: tcp } }), tcp)
  assert.strictEqual(internals.wrapTransportSend({}, () => () => {}), false)
  const sent = []
  const transport = { send (packets) { sent.push(packets) } }
  assert.strictEqual(internals.wrapTransportSend(transport, (send) => (packets) => send(['wrapped', ...packets])), true)
  transport.send(['p'])
  assert.deepStrictEqual(sent, [['wrapped', 'p']])
})

test('socket.io: pid, server options and Namespace#_add fall back when absent', () => {
  assert.strictEqual(internals.privateSessionIdOf({ pid: 'abc' }), 'abc')
  assert.strictEqual(internals.privateSessionIdOf({}), null)
  assert.strictEqual(internals.privateSessionIdOf({ pid: 7 }), null)
  assert.deepStrictEqual(internals.serverOptionsOf({}), {})
  assert.deepStrictEqual(internals.serverOptionsOf({ opts: { a: 1 } }), { a: 1 })
  const restoreNothing = internals.interceptNamespaceAdd({}, { before () { throw new Error('never') } })
  restoreNothing()
  const calls = []
  const nsp = { _add (client, auth, fn) { calls.push(['add', auth]); return 'r' } }
  const own = nsp._add
  const restore = internals.interceptNamespaceAdd(nsp, { before: (c, auth) => calls.push(['before', auth]), after: (c, auth) => calls.push(['after', auth]) })
  assert.strictEqual(nsp._add({}, 1, null), 'r')
  assert.deepStrictEqual(calls, [['before', 1], ['add', 1], ['after', 1]])
  restore()
  assert.strictEqual(nsp._add, own)
})

test('socket.io-adapter: the BROADCAST message type, exported or not', () => {
  assert.strictEqual(internals.clusterMessageType({ MessageType: { BROADCAST: 3 } }, 'BROADCAST'), 3)
  assert.strictEqual(internals.clusterMessageType({}, 'BROADCAST'), 3, 'socket.io-adapter 2.5.3 does not export MessageType')
  assert.strictEqual(internals.clusterMessageType(require('socket.io-adapter'), 'BROADCAST'), require('socket.io-adapter').MessageType.BROADCAST)
})
