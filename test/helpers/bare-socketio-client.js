'use strict'

/**
 * A bare socket.io client over `ws` (engine.io protocol 4, socket.io
 * protocol 5, namespace '/', WebSocket only): the handshake, pongs, events
 * without acks out, one ack in. It does a fraction of socket.io-client's
 * per-message work, so a benchmark measures the servers, and a test can see
 * the TCP socket under it (`tcp`).
 */

const { EventEmitter } = require('events')
const WebSocket = require('ws')

const EVENT = '42'
const ACK = '43'

/**
 * @param {number} port
 * @param {{ onEvent?: (frame: string) => void, auth?: object, hangUpAfterConnect?: boolean }} [options] onEvent gets each event frame as text
 *   (`42["name",...]`); auth goes in the CONNECT packet (socket.io-client puts `pid` and `offset`
 *   there to be recovered); hangUpAfterConnect ends the TCP connection right after sending CONNECT
 * @returns {EventEmitter & { ready: Promise<void>, tcp: () => import('net').Socket, send: Function, request: Function, close: Function }}
 */
function connectBareClient (port, options) {
  const onEvent = (options && options.onEvent) || function ignore () {}
  const client = new EventEmitter()
  const ws = new WebSocket(`ws://127.0.0.1:${port}/socket.io/?EIO=4&transport=websocket`)
  const pendingAcks = new Map()
  let nextAckId = 0
  /** Resolves with the CONNECT answer's payload (`{ sid, pid }`). */
  client.ready = new Promise((resolve, reject) => {
    ws.once('error', reject)
    client.once('connected', resolve)
  })
  /** Resolves once the WebSocket is closed, from either side. */
  client.closed = new Promise((resolve) => ws.once('close', resolve))
  const connectPacket = '40' + (options && options.auth ? JSON.stringify(options.auth) : '')
  ws.on('message', function onFrame (data) {
    const text = data.toString()
    if (text.startsWith(EVENT)) return onEvent(text)
    if (text === '2') return ws.send('3') // engine.io ping -> pong
    if (text.charCodeAt(0) === 48 /* '0': engine.io open */) {
      ws.send(connectPacket)
      if (options && options.hangUpAfterConnect) ws._socket.end()
      return
    }
    if (text.startsWith('40')) return client.emit('connected', text.length > 2 ? JSON.parse(text.slice(2)) : {})
    if (text.startsWith(ACK)) {
      const open = text.indexOf('[')
      const id = Number(text.slice(2, open))
      const done = pendingAcks.get(id)
      pendingAcks.delete(id)
      if (done) done(JSON.parse(text.slice(open)))
    }
  })
  /** The TCP socket under the WebSocket. */
  client.tcp = () => ws._socket
  /** Send an event, as socket.emit(name, ...args) does. */
  client.send = (name, ...args) => ws.send(EVENT + JSON.stringify([name, ...args]))
  /** Send an event with an acknowledgement; resolves with the ack's arguments. */
  client.request = (name, ...args) => new Promise((resolve) => {
    const id = nextAckId++
    pendingAcks.set(id, resolve)
    ws.send(EVENT + id + JSON.stringify([name, ...args]))
  })
  client.close = () => ws.terminate()
  return client
}

module.exports = { connectBareClient }
