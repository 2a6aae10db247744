'use strict'

/**
 * One TCP write per engine.io flush on WebSocket connections.
 *
 * engine.io writes one packet per WebSocket frame and ws writes each frame
 * with its own socket write: a burst of broadcasts costs one writev system
 * call (and one TCP segment, and one read on the client) per message per
 * client. While a write is in flight engine.io already queues the next
 * packets and flushes them together; corking the TCP socket around that
 * flush turns it into one write. A lone packet is written at once, as
 * before: only what was queued anyway is coalesced, so latency is unchanged.
 * Frames, their order and their write callbacks are untouched.
 */

const debug = require('debug')('clusterize:socket.io')
const { tcpSocketOfTransport, wrapTransportSend } = require('./socketio-internals')

const kCoalesced = Symbol('clusterize.coalescedSends')

/**
 * Cork the TCP socket while a WebSocket transport sends several packets.
 * @param {object} transport an engine.io transport
 */
function coalesceTransportSends (transport) {
  if (!transport || transport.name !== 'websocket' || transport[kCoalesced]) return
  transport[kCoalesced] = true
  wrapTransportSend(transport, function corkAround (send) {
    return function sendCoalesced (packets) {
      const tcp = packets.length > 1 ? tcpSocketOfTransport(transport) : null
      if (tcp === null) return send(packets)
      tcp.cork()
      try {
        return send(packets)
      } finally {
        tcp.uncork()
      }
    }
  })
}

/**
 * Coalesce the writes of every WebSocket connection of an engine.io server,
 * also those that upgrade from long polling.
 * @param {object} engine socket.io's `io.engine`
 */
function coalesceWebSocketWrites (engine) {
  if (!engine || engine[kCoalesced] || typeof engine.on !== 'function') return
  engine[kCoalesced] = true
  debug('coalescing WebSocket writes')
  engine.on('connection', function onEngineConnection (socket) {
    coalesceTransportSends(socket.transport)
    socket.on('upgrade', function onUpgrade (transport) {
      coalesceTransportSends(transport)
    })
  })
}

module.exports = { coalesceWebSocketWrites }
