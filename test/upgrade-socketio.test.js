'use strict'

/**
 * socket.io connection-state recovery through a primary upgrade (#26): the
 * old primary's packet log, offsets and persisted sessions move to the new
 * primary, and the old workers' clients, cut by the drain (1012), reconnect
 * to the new workers recovered, with their socket id, and get every message
 * once and in order while senders broadcast the whole time. Real primaries
 * (the upgrade signal, as `clusterize upgrade` sends it), real
 * socket.io-client clients; every process a test saw is killed by PID at the
 * end. No timing thresholds.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const fs = require('fs')
const os = require('os')
const { spawn } = require('child_process')
const { io: connectClient } = require('socket.io-client')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { ask, startSender, stopAndDeliver, assertRecoveredEachTime, assertUnsureAllOrNone, assertSenderOrder } = require('./helpers/socketio-sender')
const { isAlive } = require('../lib/process-alive')

const FIXTURE = path.join(__dirname, 'fixtures', 'upgrade-socketio.js')
const sockets = []
/** Every pid a test saw: primaries and workers. */
const pids = new Set()

after(async () => {
  for (const socket of sockets) socket.disconnect()
  for (const pid of pids) {
    if (isAlive(pid)) {
      try { process.kill(pid, 'SIGKILL') } catch {}
    }
  }
})

/** The fixture's primary; `lines` collects its (and its successors') JSON lines. */
function startPrimary (options, env) {
  const child = spawn(process.execPath, [FIXTURE], {
    env: Object.assign({}, process.env, { CZ_TEST_OPTIONS: JSON.stringify(options), NO_COLOR: '1' }, env),
    stdio: ['ignore', 'pipe', 'pipe']
  })
  pids.add(child.pid)
  const out = { text: '', lines: [] }
  let partial = ''
  child.stdout.on('data', (chunk) => {
    out.text += chunk
    const parts = (partial + chunk).split('\n')
    partial = parts.pop()
    for (const line of parts) {
      if (!line.startsWith('{"cz')) continue
      try { out.lines.push(JSON.parse(line)) } catch {}
    }
  })
  child.stderr.on('data', (chunk) => { out.text += chunk })
  return { child, out }
}

/** A client in `room` that records every 'msg' and every (re)connection. */
function receiver (port, room, name) {
  const socket = connectClient(`http://127.0.0.1:${port}`, { transports: ['websocket'], forceNew: true, query: { room, name }, reconnectionDelay: 50, reconnectionDelayMax: 200 })
  sockets.push(socket)
  const client = { socket, room, name, got: [], offsets: [], connects: [] }
  socket.on('msg', (data, offset) => {
    client.got.push(data.n)
    client.offsets.push(offset)
  })
  socket.on('connect', () => client.connects.push({ id: socket.id, recovered: socket.recovered }))
  return client
}

/**
 * Is `offset` after `before` in the namespace's one log? Stream ids with
 * bus.redis ('<ms>-<n>'), else '<epoch>:<seq>' of the same epoch.
 */
function offsetAfter (offset, before) {
  const stream = /^(\d+)-(\d+)$/
  const a = stream.exec(offset)
  const b = stream.exec(before)
  if (a && b) return Number(a[1]) > Number(b[1]) || (a[1] === b[1] && Number(a[2]) > Number(b[2]))
  const cut = (o) => [o.slice(0, o.lastIndexOf(':')), Number(o.slice(o.lastIndexOf(':') + 1))]
  const [epochA, seqA] = cut(offset)
  const [epochB, seqB] = cut(before)
  return epochA === epochB && seqA > seqB
}

/** Every client's whoami once all are connected to workers of primary `primary`. */
async function onPrimary (clients, primary) {
  let answers = []
  await eventually(async () => {
    if (!clients.every((c) => c.socket.connected)) return false
    answers = await Promise.all(clients.map((c) => ask(c.socket, 'whoami').catch(() => null)))
    return answers.every((w) => w !== null && w.primary === primary)
  }, { what: () => `every client on a worker of primary ${primary}: ${JSON.stringify(answers.map((w) => w && [w.pid, w.primary, w.recovered]))}, connected ${clients.map((c) => c.socket.connected)}`, intervalMs: 100, timeoutMs: 60000 })
  for (const w of answers) pids.add(w.pid)
  return answers
}

async function upgrade (primary, from) {
  const count = primary.out.lines.filter((l) => l.czUpgrade).length
  process.kill(from, 'SIGURG')
  const line = await eventually(() => primary.out.lines.filter((l) => l.czUpgrade)[count], { timeoutMs: 90000, what: () => `the upgrade of primary ${from}\n${primary.out.text}` })
  const result = line.czUpgrade
  assert.strictEqual(result.ok, true, `upgrade: ${result.reason}\n${primary.out.text}`)
  assert.notStrictEqual(result.pid, from)
  pids.add(result.pid)
  return result.pid
}

/**
 * Two upgrades in a row (the second from a primary that took the state
 * over), 8 receivers in two rooms, a sender per room broadcasting all along.
 */
async function upgradesRecover (t, options, env) {
  const port = await freePort()
  // The senders broadcast as fast as acks come back: on a busy box, while a client waits for its old
  // worker's persist, more than the default 10000 packets (recovery.maxPackets) can go by, and a
  // client whose missed packets are no longer all in the log connects as a new socket, by design.
  // These tests are about the hand-over, not that bound (test/service-bounds.test.js has it).
  const recovery = { maxPackets: 200000 }
  const primary = startPrimary(Object.assign({ port, workers: 2, health: { heartbeatMs: 200 }, recovery }, options), env)
  try {
    await clientsRecover(t, port, primary)
  } catch (err) {
    // The primaries' output (DEBUG=clusterize:* adds the recovery's own trace) beside the failure.
    const file = path.join(os.tmpdir(), `upgrade-socketio-${process.pid}-${Date.now()}.log`)
    fs.writeFileSync(file, primary.out.text)
    err.message += `\n(the primaries' output: ${file})`
    throw err
  }
}

async function clientsRecover (t, port, primary) {
  const ready = await eventually(() => primary.out.lines.find((l) => l.czReady), { timeoutMs: 60000, what: () => 'the primary to serve\n' + primary.out.text })
  let current = ready.czReady
  const clients = []
  for (let i = 0; i < 8; i++) clients.push(receiver(port, i % 2 === 0 ? 'a' : 'b', `client-${i}`))
  const before = await onPrimary(clients, current)
  const ids = clients.map((c) => c.socket.id)
  const senders = [startSender(port, 'a', sockets), startSender(port, 'b', sockets)]
  await eventually(() => senders.every((s) => s.acked.length >= 5), { what: 'senders under way' })

  for (let round = 1; round <= 2; round++) {
    const next = await upgrade(primary, current)
    // Every client was cut by its old worker's drain (1012) and came back on a new primary's worker.
    await onPrimary(clients, next)
    const acked = senders.map((s) => s.acked.length)
    await eventually(() => senders.every((s, i) => s.acked.length >= acked[i] + 5), { what: `senders under way after upgrade ${round}` })
    await eventually(() => !isAlive(current), { timeoutMs: 60000, what: () => `the old primary ${current} to exit\n${primary.out.text}` })
    current = next
  }
  // Everything acked has arrived everywhere.
  await stopAndDeliver(senders, clients)
  for (const c of clients) {
    const sender = senders.find((s) => s.room === c.room)
    const around = (i) => `${JSON.stringify(c.got.slice(Math.max(0, i - 3), i + 3))} offsets ${JSON.stringify(c.offsets.slice(Math.max(0, i - 3), i + 3))}, connections ${JSON.stringify(c.connects)}`
    // Exactly once, in the log's order: each offset after the one before, in one sequence through
    // every upgrade (the same epoch: the new primaries numbered on from the old ones).
    for (let i = 1; i < c.offsets.length; i++) assert.ok(offsetAfter(c.offsets[i], c.offsets[i - 1]), `${c.name}: offset ${c.offsets[i]} after ${c.offsets[i - 1]}: ${around(i)}`)
    assert.strictEqual(new Set(c.got).size, c.got.length, `${c.name}: a message twice`)
    // And in the sender's order among what it sent on one connection (across its reconnections the
    // order depends on how soon the old primary numbers: assertSenderOrder()).
    assertSenderOrder(c, sender, around)
    const got = new Set(c.got)
    for (const n of sender.acked) {
      if (got.has(n)) continue
      const at = c.got.findIndex((m) => m > n)
      assert.fail(`${c.name} (room ${c.room}) missed message ${n}: got ${around(at === -1 ? c.got.length : at)}`)
    }
    for (const n of c.got) assert.ok(sender.acked.includes(n) || sender.unsure.includes(n), `${c.name}: ${n} was never sent to room ${c.room}`)
    assert.ok(c.offsets.every((o) => typeof o === 'string'), `${c.name}: every event carried an offset`)
    assert.strictEqual(new Set(c.offsets).size, c.offsets.length, `${c.name}: no offset given twice`)
    assert.ok(c.connects.length >= 3, `${c.name}: cut by each upgrade`)
    assertRecoveredEachTime(c)
  }
  assertUnsureAllOrNone(senders, clients)
  const now = await onPrimary(clients, current)
  now.forEach((w, i) => {
    assert.strictEqual(w.recovered, true)
    assert.strictEqual(w.id, ids[i], 'same socket id on the server')
    assert.strictEqual(w.data.firstWorkerPid, before[i].pid, 'socket.data restored from the first worker')
    assert.deepStrictEqual(w.rooms.sort(), [ids[i], clients[i].room].sort(), 'rooms restored')
  })
  t.diagnostic(`messages: ${senders.map((s) => `room ${s.room}: ${s.acked.length} acked, ${s.unsure.length} unsure`).join('; ')}; ` +
    `reconnections: ${clients.map((c) => c.connects.length - 1).join(', ')}`)
  for (const socket of sockets.splice(0)) socket.disconnect()
  process.kill(current, 'SIGTERM')
  await eventually(() => !isAlive(current), { timeoutMs: 60000, what: `primary ${current} to stop` })
}

test('socket.io clients recover through two primary upgrades: every message once and in order, same socket id, rooms and socket.data', { timeout: 300000 }, async (t) => {
  await upgradesRecover(t, {})
})

test("scheduling 'none' (the new workers accept before the old primary says go): clients recover through the upgrades", { timeout: 300000 }, async (t) => {
  await upgradesRecover(t, { scheduling: 'none' })
})

test('with bus.redis (the state is in Redis; the old workers\' sockets are handed over): clients recover through the upgrades', { timeout: 300000 }, async (t) => {
  const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const channel = uniquePrefix('upgrade-sio')
  try {
    await upgradesRecover(t, { bus: { redis: REDIS_URL, channel } })
  } finally {
    await deletePrefix(channel)
  }
})

// The old primary is held up (1.5 s, in slices) as it drains: a message an old worker acked just
// before reaches the log after later ones the sender sent through a new worker. Every client still
// gets it once and in the log's order (offsets), and in the sender's order per sender connection.
test("with bus.redis, when the old primary takes its workers' persists late (their clients reach the new workers first), they still recover", { timeout: 300000 }, async (t) => {
  const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)
  const channel = uniquePrefix('upgrade-sio-late')
  try {
    await upgradesRecover(t, { bus: { redis: REDIS_URL, channel } }, { CZ_STALL_DRAINING_PRIMARY_MS: '1500' })
  } finally {
    await deletePrefix(channel)
  }
})

test("when the old primary takes its workers' persists late (their clients reach the new workers first), they still recover", { timeout: 300000 }, async (t) => {
  await upgradesRecover(t, {}, { CZ_STALL_DRAINING_PRIMARY_MS: '1500' })
})
