'use strict'

/**
 * socket.io-client helpers for the recovery tests (fixtures/socketio-recovery.js):
 * an ack'ed request, a sender of numbered messages to a room, and the wait
 * for what the senders had acked to reach every client.
 */

const { io: connectClient } = require('socket.io-client')
const assert = require('node:assert')
const { eventually } = require('./wait')

/** Ask the server with an ack; rejects on the client's ack timeout. */
function ask (socket, event, ...args) {
  return new Promise((resolve, reject) => {
    socket.timeout(5000).emit(event, ...args, (err, value) => err ? reject(err) : resolve(value))
  })
}

/**
 * Emit numbered messages to `room`, one at a time, until stopped. A message
 * whose ack is lost (to a reload, a crash) is "unsure": the server may or may
 * not have emitted it; it is never sent again under the same number.
 * @param {number} port
 * @param {string} room
 * @param {Array} sockets where the client is added (the test disconnects them)
 * @param {number} [from] the first number
 */
function startSender (port, room, sockets, from = 1) {
  const socket = connectClient(`http://127.0.0.1:${port}`, { transports: ['websocket'], forceNew: true, reconnectionDelay: 50, reconnectionDelayMax: 200 })
  sockets.push(socket)
  const sender = { room, acked: [], unsure: [], stopped: false, done: null, connection: 0, connectionOf: new Map() }
  // Which of the sender's connections each message went out on (1 = the first): emits on one
  // connection are numbered in the order they were made; across a cut they need not be (see
  // assertSenderOrder()).
  socket.on('connect', () => { sender.connection++ })
  sender.done = (async () => {
    let n = from - 1
    while (!sender.stopped) {
      if (!socket.connected) {
        // stop() wakes it too: a server that never comes back must not hold the test forever.
        await new Promise((resolve) => {
          socket.once('connect', resolve)
          sender.wake = resolve
        })
        continue
      }
      n++
      sender.connectionOf.set(n, sender.connection)
      try {
        await ask(socket, 'send', room, n)
        sender.acked.push(n)
      } catch {
        sender.unsure.push(n)
      }
    }
  })()
  sender.stop = () => {
    sender.stopped = true
    if (sender.wake) sender.wake()
    return sender.done
  }
  return sender
}

/**
 * Stop the senders, then wait until every client has the last message its room's sender had acked
 * (clients as the recovery tests keep them: `{ name, room, got: number[] }`).
 */
async function stopAndDeliver (senders, clients) {
  await Promise.all(senders.map((s) => s.stop()))
  for (const c of clients) {
    const sender = senders.find((s) => s.room === c.room)
    const last = sender.acked[sender.acked.length - 1]
    await eventually(() => c.got.includes(last), { what: `${c.name} got message ${last} of room ${c.room}` })
  }
}

/** Each reconnection of client `c` after its first connection was a recovery, with the same socket id. */
function assertRecoveredEachTime (c) {
  assert.deepStrictEqual(c.connects.map((x) => x.recovered), [false].concat(c.connects.slice(1).map(() => true)), `${c.name}: recovered on every reconnection`)
  assert.ok(c.connects.every((x) => x.id === c.connects[0].id), `${c.name}: same socket id after recovery`)
}

/**
 * Client `c` got the messages `sender` sent on one connection in the order it sent them. A sender
 * cut by a reload or an upgrade reconnects as a new socket at once (socket.io restores only a client
 * that has received a packet, and a sender receives none), so what it sends through a new worker can
 * be numbered before what its old worker's primary had not numbered yet: the order across its
 * connections is not asserted. Every client's order is the log's (the tests check the offsets).
 * @param {{ name: string, got: number[] }} c
 * @param {{ connectionOf: Map<number, number> }} sender
 * @param {(i: number) => string} around what the client got around index i, for the message
 */
function assertSenderOrder (c, sender, around) {
  const lastOn = new Map()
  c.got.forEach((n, i) => {
    const connection = sender.connectionOf.get(n)
    const last = lastOn.get(connection)
    assert.ok(last === undefined || n > last, `${c.name}: message ${n} after ${last}, both sent on the sender's connection ${connection}: ${around(i)}`)
    lastOn.set(connection, n)
  })
}

/** A message whose ack was lost reached every client of its room or none. */
function assertUnsureAllOrNone (senders, clients) {
  for (const sender of senders) {
    const members = clients.filter((c) => c.room === sender.room)
    for (const n of sender.unsure) {
      const count = members.filter((c) => c.got.includes(n)).length
      assert.ok(count === 0 || count === members.length, `unsure message ${n} of room ${sender.room} reached ${count} of ${members.length} clients`)
    }
  }
}

module.exports = { ask, startSender, stopAndDeliver, assertRecoveredEachTime, assertUnsureAllOrNone, assertSenderOrder }
