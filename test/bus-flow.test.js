'use strict'

// Flow control on the bus (#23 item 4): a sender that awaits bus.drained()
// loses nothing to a live receiver, and a stuck receiver costs reported,
// counted drops instead of a stalled or crashed service. Real clusters,
// driven through test/fixtures/bus-cluster.js.

const test = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { BUS_FIXTURE: FIXTURE, busDriver } = require('./helpers/bus-driver')

test.after(() => stopAll())

test('50,000 1 KiB broadcasts from a sender that awaits bus.drained() all reach the other worker, in order', { timeout: 180000 }, async (t) => {
  const count = 50000
  // Default bounds (16 MiB), as in the report: the sender outruns the receiver's parsing.
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '2' } })
  const run = busDriver(cluster, 120000)
  t.after(() => cluster.stop())

  const sent = await run(0, 'sendSeq', { count, size: 1024 })
  assert.strictEqual(sent.sent, count)
  assert.ok(sent.waits > 0, 'the sender was asked to wait (50 MiB is over the 16 MiB bound)')
  // Settles either way: every message arrived, or the primary dropped some.
  await eventually(async () => {
    const [sequence, primary] = await Promise.all([run(1, 'sequence'), run('primary', 'status')])
    return sequence.count === count || primary.dropped > 0
  }, { timeoutMs: 120000, intervalMs: 200, what: 'worker 1 to receive every message' })
  const primary = await run('primary', 'status')
  assert.strictEqual(primary.dropped, 0, 'the primary dropped nothing')
  const sequence = await run(1, 'sequence')
  assert.deepStrictEqual(sequence, { count, next: count, outOfOrder: 0, firstGap: null })
  assert.deepStrictEqual(await run(0, 'drops'), [])
})

test('a stuck receiver: its senders get reported drops instead of waiting on it, the service stays up, and it catches up once it reads again', { timeout: 120000 }, async (t) => {
  const limit = 256 * 1024
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-bus-stuck-'))
  const unblock = path.join(dir, 'go')
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '3', BUS_MAX_BYTES: '65536', BUS_MAX_QUEUED: String(limit), BUS_STALL_MS: '300', BUS_PROBES: '1' } })
  const run = busDriver(cluster, 120000)
  t.after(async () => {
    fs.writeFileSync(unblock, '')
    await cluster.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const pids = (await Promise.all([0, 1, 2].map((id) => run(id, 'whoami')))).map((w) => w.pid)

  // Worker 2's event loop is blocked until the test says so: it reads nothing.
  const isBlocked = run.note((data) => data.event === 'blocked' && data.id === 2)
  const blocked = run(2, 'blockUntil', { file: unblock })
  await isBlocked
  const result = await run(0, 'sendSeq', { count: 200000, size: 1024, untilDropped: true })
  assert.ok(result.drops > 0, `the sender was told of drops (sent ${result.sent})`)
  const drops = await run(0, 'drops')
  assert.strictEqual(drops[0].workerId, 2)
  assert.strictEqual(drops[0].topic, 't:seq')
  assert.ok(drops[0].count >= 1)

  const primary = await run('primary', 'status')
  assert.ok(primary.dropped > 0, 'counted in the primary')
  assert.strictEqual(primary.stuckWorkers, 1)
  assert.ok(primary.queuedBytes <= 3 * limit, `the primary holds ${primary.queuedBytes} bytes`)
  const stats = await cluster.stats()
  assert.ok(stats.bus.dropped > 0, 'stats() shows the drops')
  const metrics = (await cluster.probe('/metrics')).body
  assert.match(metrics, /^clusterize_bus_stuck_workers 1$/m)
  assert.match(metrics, /^clusterize_bus_dropped_total [1-9]\d*$/m)
  // Worker 1, live, lost nothing of what worker 0 sent.
  await eventually(async () => (await run(1, 'sequence')).count === result.sent, { timeoutMs: 30000, what: 'worker 1 to receive all of it' })
  assert.strictEqual((await run(1, 'sequence')).outOfOrder, 0)
  // A gather does not wait on the stuck worker.
  const gathered = await run(1, 'gather', { topic: 't:who', timeoutMs: 60000 })
  assert.deepStrictEqual(gathered.missing, [])
  assert.deepStrictEqual(gathered.entries.map((e) => [e.workerId, e.error ? e.error.code : 'ok']), [[0, 'ok'], [1, 'ok'], [2, 'ERR_CLUSTERIZE_BUS_BACKPRESSURE']])

  fs.writeFileSync(unblock, '')
  assert.strictEqual(await blocked, true)
  await eventually(async () => (await run('primary', 'status')).stuckWorkers === 0, { timeoutMs: 30000, what: 'worker 2 to read again' })
  await run(0, 'broadcast', { topic: 't:b', data: { marker: 'after' } })
  await eventually(async () => (await run(2, 'received')).some((r) => r.data && r.data.marker === 'after'), { timeoutMs: 30000, what: 'worker 2 to get messages again' })
  // Nobody was restarted, and the cluster serves.
  assert.deepStrictEqual((await Promise.all([0, 1, 2].map((id) => run(id, 'whoami')))).map((w) => w.pid), pids)
  assert.strictEqual((await cluster.get('/')).status, 200)
})

test('a worker that bypasses its own accounting cannot make the primary hold more than its bound', { timeout: 120000 }, async (t) => {
  const limit = 256 * 1024
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-bus-raw-'))
  const unblock = path.join(dir, 'go')
  // Not stuck within the test: only the primary's own bound can stop the flood.
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '2', BUS_MAX_BYTES: '65536', BUS_MAX_QUEUED: String(limit), BUS_STALL_MS: '600000' } })
  const run = busDriver(cluster, 120000)
  t.after(async () => {
    fs.writeFileSync(unblock, '')
    await cluster.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const isBlocked = run.note((data) => data.event === 'blocked' && data.id === 1)
  const blocked = run(1, 'blockUntil', { file: unblock })
  await isBlocked
  // 8 MiB of broadcasts towards a worker that reads nothing, none of it on the sender's account.
  await run(0, 'rawFlood', { ticks: 128, perTick: 64, size: 1024 })
  const primary = await run('primary', 'status')
  // 2 workers: at most (2 + 1) budgets for one receiver, plus the message that crossed it.
  assert.ok(primary.queuedBytes <= 3 * limit + 2048, `the primary holds ${primary.queuedBytes} bytes`)
  assert.ok(primary.dropped > 0, 'the rest was dropped and counted')
  assert.strictEqual(primary.stuckWorkers, 0)
  fs.writeFileSync(unblock, '')
  assert.strictEqual(await blocked, true)
  assert.strictEqual((await cluster.get('/')).status, 200)
})
