'use strict'

/**
 * A WebSocket client on a bare TCP socket that records every frame the
 * server sends, in order, so a test can see what no WebSocket library
 * shows: a second Close frame, or data frames after a Close. It answers the
 * first Close with a Close echoing its code, as a browser does, and nothing
 * else. Only for tests on loopback; frames from the server are unmasked.
 */

const net = require('net')
const { eventually } = require('./wait')

const OPCODES = { 0: 'continuation', 1: 'text', 2: 'binary', 8: 'close', 9: 'ping', 10: 'pong' }

/**
 * @param {number} port
 * @param {{ path?: string, echoClose?: boolean }} [options] echoClose: answer the server's Close (default true)
 * @returns {Promise<{ frames: object[], socket: import('net').Socket, closed: Promise<void>, closes: () => object[], afterFirstClose: () => object[] }>}
 *   each frame: `{ type, code?, reason?, text? }`; resolves once the server answered 101
 */
async function connectRawWebSocket (port, options) {
  const echoClose = !(options && options.echoClose === false)
  const socket = net.connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`GET ${(options && options.path) || '/'} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n')
  const client = {
    socket,
    frames: [],
    upgraded: false,
    closed: new Promise((resolve) => socket.once('close', resolve)),
    closes: () => client.frames.filter((f) => f.type === 'close'),
    /** Every frame after the first Close. */
    afterFirstClose: () => client.frames.slice(client.frames.findIndex((f) => f.type === 'close') + 1),
    /** Send one text frame. */
    sendText: (text) => socket.write(maskedFrame(0x1, Buffer.from(text, 'utf8')))
  }
  let buffer = Buffer.alloc(0)
  let echoed = false
  socket.on('data', function onData (chunk) {
    buffer = Buffer.concat([buffer, chunk])
    if (!client.upgraded) {
      const end = buffer.indexOf('\r\n\r\n')
      if (end < 0) return
      client.upgraded = /^HTTP\/1\.1 101/.test(buffer.toString('latin1', 0, end))
      buffer = buffer.subarray(end + 4)
    }
    for (let frame = readFrame(buffer); frame !== null; frame = readFrame(buffer)) {
      buffer = buffer.subarray(frame.size)
      client.frames.push(frame.value)
      if (frame.value.type === 'close' && echoClose && !echoed && socket.writable) {
        echoed = true
        socket.write(maskedFrame(0x8, closePayload(frame.value.code)))
      }
    }
  })
  await eventually(() => client.upgraded, { what: 'the 101 answer' })
  return client
}

/** One complete frame at the start of `buffer`, or null if it has not all arrived. */
function readFrame (buffer) {
  if (buffer.length < 2) return null
  let length = buffer[1] & 0x7f
  let offset = 2
  if (length === 126) {
    if (buffer.length < 4) return null
    length = buffer.readUInt16BE(2)
    offset = 4
  } else if (length === 127) {
    if (buffer.length < 10) return null
    length = Number(buffer.readBigUInt64BE(2))
    offset = 10
  }
  if (buffer.length < offset + length) return null
  const payload = buffer.subarray(offset, offset + length)
  const type = OPCODES[buffer[0] & 0x0f] || `opcode-${buffer[0] & 0x0f}`
  const value = { type }
  if (type === 'close') {
    value.code = payload.length >= 2 ? payload.readUInt16BE(0) : null
    value.reason = payload.subarray(2).toString('utf8')
  } else if (type === 'text') {
    value.text = payload.toString('utf8')
  }
  return { value, size: offset + length }
}

/** The payload of a Close frame with `code` (none when null). */
function closePayload (code) {
  const payload = Buffer.alloc(code === null ? 0 : 2)
  if (code !== null) payload.writeUInt16BE(code, 0)
  return payload
}

/** A client-to-server frame, masked as clients must (RFC 6455 5.3); payloads under 126 bytes. */
function maskedFrame (opcode, payload) {
  const mask = Buffer.from([1, 2, 3, 4])
  const masked = Buffer.from(payload)
  for (let i = 0; i < masked.length; i++) masked[i] ^= mask[i % 4]
  return Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | masked.length]), mask, masked])
}

module.exports = { connectRawWebSocket }
