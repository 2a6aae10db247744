'use strict'

// The bus across real processes: a primary and three workers started by
// clusterize(), driven through test/fixtures/bus-cluster.js.

const test = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { startCluster, stopAll, isAlive, waitDead } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { BUS_FIXTURE: FIXTURE, busDriver } = require('./helpers/bus-driver')


test.after(() => stopAll())

/** How long and how often the checks below poll. */
const POLL = { timeoutMs: 15000, intervalMs: 25 }

const TARGETS = ['primary', 0, 1, 2]

async function receivedBy (run) {
  const out = {}
  for (const target of TARGETS) out[target] = await run(target, 'received')
  return out
}

function count (list, marker) {
  return list.filter((r) => r.data && r.data.marker === marker).length
}

test('bus across a real cluster (primary + 3 workers)', { timeout: 120000 }, async (t) => {
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '3', BUS_MAX_BYTES: '65536' } })
  const run = busDriver(cluster)
  t.after(() => cluster.stop())

  await t.test('a broadcast from worker 0 reaches workers 1 and 2 and the primary exactly once; worker 0 only with self', async () => {
    await run(0, 'broadcast', { topic: 't:b', data: { marker: 'plain' } })
    await run(0, 'broadcast', { topic: 't:b', data: { marker: 'with-self' }, self: true })
    // A fence: messages from one sender reach each receiver in order, so once
    // the fence has arrived everywhere, any duplicate would already be there.
    await run(0, 'broadcast', { topic: 't:b', data: { marker: 'fence' }, self: true })
    const seen = await eventually(async () => {
      const all = await receivedBy(run)
      return TARGETS.every((target) => count(all[target], 'fence') === 1) && all
    }, { ...POLL, what: 'the fence broadcast' })
    for (const target of ['primary', 1, 2]) {
      assert.strictEqual(count(seen[target], 'plain'), 1, `${target} got the plain broadcast once`)
      assert.strictEqual(count(seen[target], 'with-self'), 1, `${target} got the self broadcast once`)
      const entry = seen[target].find((r) => r.data.marker === 'plain')
      assert.deepStrictEqual(entry.meta, { topic: 't:b', from: 0, generation: 1 })
    }
    assert.strictEqual(count(seen[0], 'plain'), 0, 'the sender does not get its own broadcast without self')
    assert.strictEqual(count(seen[0], 'with-self'), 1, 'the sender gets its own broadcast once with self')
    for (const target of TARGETS) await run(target, 'clear')
  })

  await t.test('a broadcast from the primary reaches every worker once, the primary itself only with self', async () => {
    await run('primary', 'broadcast', { topic: 't:b', data: { marker: 'from-primary' } })
    await run('primary', 'broadcast', { topic: 't:b', data: { marker: 'fence' }, self: true })
    const seen = await eventually(async () => {
      const all = await receivedBy(run)
      return TARGETS.every((target) => count(all[target], 'fence') === 1) && all
    }, { ...POLL, what: 'the fence broadcast' })
    for (const target of [0, 1, 2]) {
      assert.strictEqual(count(seen[target], 'from-primary'), 1)
      assert.strictEqual(seen[target][0].meta.from, 'primary')
    }
    assert.strictEqual(count(seen.primary, 'from-primary'), 0)
    for (const target of TARGETS) await run(target, 'clear')
  })

  await t.test('send() reaches one worker slot, or the primary', async () => {
    assert.strictEqual(await run(0, 'send', { to: 2, topic: 't:d', data: { marker: 'direct' } }), true)
    assert.strictEqual(await run(1, 'send', { to: 'primary', topic: 't:d', data: { marker: 'to-primary' } }), true)
    assert.strictEqual(await run('primary', 'send', { to: 1, topic: 't:d', data: { marker: 'primary-to-1' } }), true)
    assert.strictEqual(await run('primary', 'send', { to: 7, topic: 't:d', data: { marker: 'nobody' } }), false)
    const seen = await eventually(async () => {
      const all = await receivedBy(run)
      return count(all[2], 'direct') === 1 && count(all.primary, 'to-primary') === 1 && count(all[1], 'primary-to-1') === 1 && all
    }, { ...POLL, what: 'direct messages' })
    assert.strictEqual(count(seen[0], 'direct') + count(seen[1], 'direct') + count(seen.primary, 'direct'), 0)
    assert.strictEqual(seen[2].find((r) => r.data.marker === 'direct').meta.from, 0)
    assert.strictEqual(seen.primary.find((r) => r.data.marker === 'to-primary').meta.from, 1)
    assert.strictEqual(seen[1].find((r) => r.data.marker === 'primary-to-1').meta.from, 'primary')
    for (const target of TARGETS) await run(target, 'clear')
  })

  await t.test('request() round trip to the primary: answer, thrown error, timeout, no handler', async () => {
    const ok = await run(1, 'request', { topic: 't:echo', data: { q: 42 } })
    assert.deepStrictEqual(ok, { ok: true, value: { echo: { q: 42 }, from: 1, generation: 1 } })
    const failed = await run(2, 'request', { topic: 't:fail' })
    assert.deepStrictEqual(failed, { ok: false, error: { message: 'primary says no', code: 'E_NOPE', name: 'Error' } })
    const hung = await run(0, 'request', { topic: 't:hang', timeoutMs: 200 })
    assert.strictEqual(hung.ok, false)
    assert.strictEqual(hung.error.code, 'ERR_CLUSTERIZE_BUS_TIMEOUT')
    const none = await run(0, 'request', { topic: 't:nobody-handles-this' })
    assert.strictEqual(none.error.code, 'ERR_CLUSTERIZE_BUS_NO_HANDLER')
    assert.match(none.error.message, /t:nobody-handles-this/)
    const local = await run('primary', 'request', { topic: 't:echo', data: 'hi' })
    assert.deepStrictEqual(local, { ok: true, value: { echo: 'hi', from: 'primary', generation: null } })
  })

  await t.test('gather() returns one answer per worker, from a worker and from the primary', async () => {
    for (const asker of [1, 'primary']) {
      const { entries, missing } = await run(asker, 'gather', { topic: 't:who' })
      assert.deepStrictEqual(missing, [])
      assert.deepStrictEqual(entries.map((e) => e.workerId), [0, 1, 2])
      for (const entry of entries) {
        assert.strictEqual(entry.result.id, entry.workerId)
        assert.strictEqual(entry.result.pid, entry.pid)
        assert.strictEqual(entry.result.asker, asker)
      }
    }
    const failed = await run(0, 'gather', { topic: 't:fail' })
    assert.deepStrictEqual(failed.entries.map((e) => e.error.message), ['worker 0 says no', 'worker 1 says no', 'worker 2 says no'])
  })

  await t.test('with one worker slow, gather() resolves at its timeout with partial results and names the missing worker', async () => {
    const { entries, missing } = await run(0, 'gather', { topic: 't:slow', data: { slow: 1 }, timeoutMs: 500 })
    assert.deepStrictEqual(missing, [1])
    assert.deepStrictEqual(entries.map((e) => [e.workerId, e.result]), [[0, { id: 0 }], [2, { id: 2 }]])
  })

  await t.test('oversized and unserialisable messages get clear errors in a worker', async () => {
    const oversize = await run(1, 'try', { kind: 'oversize' })
    assert.strictEqual(oversize.threw, true)
    assert.strictEqual(oversize.error.code, 'ERR_CLUSTERIZE_BUS_TOO_LARGE')
    assert.match(oversize.error.message, /topic "t:b"/)
    assert.match(oversize.error.message, /65548 bytes/)
    assert.match(oversize.error.message, /limit of 65536 bytes/)
    assert.match(oversize.error.message, /bus\.maxMessageBytes/)
    const oversizeRequest = await run(1, 'try', { kind: 'oversizeRequest' })
    assert.strictEqual(oversizeRequest.error.code, 'ERR_CLUSTERIZE_BUS_TOO_LARGE')
    for (const [kind, what] of [['function', /a function at key "callback"/], ['bigint', /BigInt/], ['cycle', /cycle/], ['socket', /socket/], ['symbol', /symbol/]]) {
      const result = await run(2, 'try', { kind })
      assert.strictEqual(result.threw, true, kind)
      assert.strictEqual(result.error.code, 'ERR_CLUSTERIZE_BUS_UNSERIALISABLE', kind)
      assert.match(result.error.message, /topic "t:[bd]"/, kind)
      assert.match(result.error.message, what, kind)
    }
    for (const kind of ['topic', 'longTopic']) {
      const result = await run(2, 'try', { kind })
      assert.strictEqual(result.error.code, 'ERR_CLUSTERIZE_BUS_TOPIC', kind)
    }
  })

  await t.test('garbage sent to the primary\'s IPC channel is ignored; the primary and the bus keep working', async () => {
    const primaryPid = cluster.pid
    const exitsBefore = cluster.events.filter((e) => e.event === 'worker:exit').length
    const sent = await run(0, 'garbage')
    assert.ok(sent >= 15)
    await run(0, 'broadcast', { topic: 't:b', data: { marker: 'after-garbage' } })
    const seen = await eventually(async () => {
      const all = await receivedBy(run)
      return count(all[1], 'after-garbage') === 1 && count(all[2], 'after-garbage') === 1 && count(all.primary, 'after-garbage') === 1 && all
    }, { ...POLL, what: 'a broadcast after the garbage' })
    for (const target of ['primary', 1, 2]) {
      assert.deepStrictEqual(seen[target].map((r) => r.data.marker), ['after-garbage'], `${target} received nothing from the garbage`)
    }
    assert.deepStrictEqual(await run(0, 'request', { topic: 't:echo', data: 1 }), { ok: true, value: { echo: 1, from: 0, generation: 1 } })
    assert.ok(isAlive(primaryPid))
    assert.strictEqual(cluster.events.filter((e) => e.event === 'worker:exit').length, exitsBefore)
  })
})

test('a worker that dies fails what waits on it at once', { timeout: 120000 }, async (t) => {
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '3' } })
  const run = busDriver(cluster)
  t.after(() => cluster.stop())

  await t.test('a gather waiting on a killed worker resolves at once with that worker as failed (not at its 60 s timeout)', async () => {
    const victim = await run(1, 'whoami')
    const entered = run.note((data) => data.event === 'slow-handler-entered' && data.id === 1)
    const gathering = run(0, 'gather', { topic: 't:slow', data: { slow: 1 }, timeoutMs: 60000 })
    await entered
    process.kill(victim.pid, 'SIGKILL')
    const { entries, missing } = await gathering
    assert.deepStrictEqual(missing, [])
    assert.deepStrictEqual(entries.map((e) => e.workerId), [0, 1, 2])
    const dead = entries.find((e) => e.workerId === 1)
    assert.strictEqual(dead.pid, victim.pid)
    assert.strictEqual(dead.error.code, 'ERR_CLUSTERIZE_WORKER_EXIT')
    assert.match(dead.error.message, new RegExp(`worker 1 \\(pid ${victim.pid}\\) exited before answering "t:slow"`))
    assert.deepStrictEqual(entries.filter((e) => e.workerId !== 1).map((e) => e.result), [{ id: 0 }, { id: 2 }])
    await cluster.waitEvent('worker:ready', (w) => w.id === 1 && w.pid !== victim.pid)
  })

  await t.test('the same from the primary: the gather does not wait for the dead worker', async () => {
    const victim = await run(2, 'whoami')
    const entered = run.note((data) => data.event === 'slow-handler-entered' && data.id === 2)
    const gathering = run('primary', 'gather', { topic: 't:slow', data: { slow: 2 }, timeoutMs: 60000 })
    await entered
    process.kill(victim.pid, 'SIGKILL')
    const { entries } = await gathering
    assert.strictEqual(entries.find((e) => e.workerId === 2).error.code, 'ERR_CLUSTERIZE_WORKER_EXIT')
    await cluster.waitEvent('worker:ready', (w) => w.id === 2 && w.pid !== victim.pid)
  })

  await t.test('a worker that dies with a request pending in the primary: the late answer is dropped, nothing crashes', async () => {
    const victim = await run(0, 'whoami')
    await run(0, 'requestThenDie', { afterMs: 20 })
    assert.ok(await waitDead(victim.pid, 5000))
    await cluster.waitEvent('worker:ready', (w) => w.id === 0 && w.pid !== victim.pid)
    // t:late answers after 300 ms, by then to a worker that is gone.
    await new Promise((resolve) => setTimeout(resolve, 400))
    assert.ok(isAlive(cluster.pid))
    const { entries, missing } = await run(1, 'gather', { topic: 't:who' })
    assert.deepStrictEqual(missing, [])
    assert.deepStrictEqual(entries.map((e) => e.workerId), [0, 1, 2])
    assert.notStrictEqual(entries[0].pid, victim.pid)
    assert.deepStrictEqual(await run(0, 'request', { topic: 't:late' }), { ok: true, value: 'late answer' })
  })
})

test("serialization 'advanced': Map, Set, Buffer, Date and BigInt round-trip between workers", { timeout: 60000 }, async (t) => {
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '2', BUS_SERIALIZATION: 'advanced' } })
  const run = busDriver(cluster)
  t.after(() => cluster.stop())
  await run(0, 'broadcastTyped', { topic: 't:b' })
  const got = await eventually(async () => (await run(1, 'received'))[0], { ...POLL, what: 'the typed broadcast' })
  assert.match(got.inspect, /map: Map\(1\) \{ 'a' => 1 \}/)
  assert.match(got.inspect, /set: Set\(2\) \{ 1, 2 \}/)
  assert.match(got.inspect, /buf: <Buffer 68 69>/)
  assert.match(got.inspect, /date: 1970-01-01T00:00:00\.000Z/)
  assert.match(got.inspect, /big: 12345678901234567890n/)
  const primaryGot = await eventually(async () => (await run('primary', 'received'))[0], { ...POLL, what: 'the typed broadcast in the primary' })
  assert.strictEqual(primaryGot.inspect, got.inspect)
  const answer = await run(1, 'request', { topic: 't:echo', data: [1, 'two'] })
  assert.deepStrictEqual(answer, { ok: true, value: { echo: [1, 'two'], from: 1, generation: 1 } })
})

test('backpressure: a sender past bus.maxQueuedBytes is refused, a worker that does not read costs reported drops, nothing grows without bound', { timeout: 120000 }, async (t) => {
  const limit = 256 * 1024
  const fs = require('fs')
  const os = require('os')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-bus-flood-'))
  const unblock = path.join(dir, 'go')
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '3', BUS_MAX_BYTES: '65536', BUS_MAX_QUEUED: String(limit), BUS_STALL_MS: '300' } })
  const run = busDriver(cluster)
  t.after(async () => {
    fs.writeFileSync(unblock, '')
    await cluster.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  // 20 MiB in one synchronous loop: nothing can be written before the loop ends.
  const flood = await run(0, 'flood', { topic: 't:other', count: 20000, size: 1024 })
  assert.strictEqual(flood.code, 'ERR_CLUSTERIZE_BUS_BACKPRESSURE')
  assert.ok(flood.sent > 0 && flood.sent * 1024 <= limit, `sent ${flood.sent} before the limit`)
  assert.strictEqual(flood.sent + flood.refused, 20000)
  const status = await run(0, 'status')
  assert.ok(status.refused >= flood.refused)
  assert.ok(status.queuedBytes <= limit, `worker 0 holds ${status.queuedBytes} bytes`)

  // Worker 2 stops reading; worker 0 keeps producing (awaiting drained()) until it is told of a drop.
  const isBlocked = run.note((data) => data.event === 'blocked' && data.id === 2)
  const blocked = run(2, 'blockUntil', { file: unblock })
  await isBlocked
  let highest = 0
  let producing = true
  const producer = run(0, 'sendSeq', { count: 200000, size: 1024, untilDropped: true }).finally(() => { producing = false })
  while (producing) {
    highest = Math.max(highest, (await run('primary', 'status')).queuedBytes)
  }
  const produced = await producer
  assert.ok(produced.drops > 0, 'the sender was told')
  const after = await run('primary', 'status')
  assert.ok(after.dropped > 0, 'messages to the blocked worker were dropped')
  assert.ok(Math.max(highest, after.queuedBytes) <= 3 * limit, `the primary never held more than the bound per worker (${highest} bytes)`)
  assert.strictEqual(after.maxQueuedBytes, limit)
  const stats = await cluster.stats()
  assert.ok(stats.bus.dropped > 0, 'stats() shows the drops')
  fs.writeFileSync(unblock, '')
  assert.strictEqual(await blocked, true)
  // And the cluster still serves.
  const res = await cluster.get('/')
  assert.strictEqual(res.status, 200)
})

test('bus.drained(): a worker refused for backpressure waits for room, then its next message goes through', { timeout: 60000 }, async (t) => {
  const limit = 256 * 1024
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '2', BUS_MAX_BYTES: '65536', BUS_MAX_QUEUED: String(limit) } })
  const run = busDriver(cluster)
  t.after(() => cluster.stop())
  const rounds = 32
  const result = await run(0, 'floodDrained', { topic: 't:other', rounds, perRound: 20000, size: 1024 })
  assert.strictEqual(result.error.code, 'ERR_CLUSTERIZE_BUS_BACKPRESSURE')
  assert.match(result.error.message, /Nothing was sent: `await bus\.drained\(\)` and send it again, or raise bus\.maxQueuedBytes/)
  // Each round is refused once (it stops there), never right after drained() resolved...
  assert.strictEqual(result.refused, rounds)
  assert.strictEqual(result.refusedRightAfterDrained, 0)
  // ...and each round after the first fits about half the bound again: far more than the bound in all.
  assert.ok(result.sent * 1024 > (rounds / 2) * (limit / 2), `sent ${result.sent}`)
  // The primary never throws for backpressure: drained() resolves at once there.
  assert.strictEqual(await run('primary', 'drainedAtOnce'), true)
  assert.strictEqual((await cluster.get('/')).status, 200)
})

test('backpressure: bus.send() from one worker to a worker that does not read is bounded in the primary too; gather does not wait on it', { timeout: 120000 }, async (t) => {
  const limit = 256 * 1024
  const fs = require('fs')
  const os = require('os')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-bus-send-'))
  const unblock = path.join(dir, 'go')
  const cluster = await startCluster(FIXTURE, { env: { BUS_WORKERS: '3', BUS_MAX_BYTES: '65536', BUS_MAX_QUEUED: String(limit), BUS_STALL_MS: '300' } })
  const run = busDriver(cluster)
  t.after(async () => {
    fs.writeFileSync(unblock, '')
    await cluster.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  // Worker 2 stops reading until the test says so; worker 0 sends to it until told of a drop.
  const isBlocked = run.note((data) => data.event === 'blocked' && data.id === 2)
  const blocked = run(2, 'blockUntil', { file: unblock })
  await isBlocked
  const result = await run(0, 'sendSeq', { to: 2, count: 200000, size: 1024, untilDropped: true })
  assert.ok(result.drops > 0, `worker 0 was told of drops (sent ${result.sent})`)
  assert.deepStrictEqual((await run(0, 'drops')).map((d) => [d.workerId, d.topic]).slice(0, 1), [[2, 't:seq']])
  const primary = await run('primary', 'status')
  assert.ok(primary.dropped > 0)
  assert.ok(primary.queuedBytes <= 3 * limit, `the primary holds ${primary.queuedBytes} bytes (bound ${limit} per worker)`)
  // Worker 2 is stuck: a gather lists it as an error at once instead of waiting 30 s for it.
  const gathered = await run(1, 'gather', { topic: 't:who', data: { pad: 'x'.repeat(60000) }, timeoutMs: 30000 })
  assert.deepStrictEqual(gathered.missing, [])
  assert.deepStrictEqual(gathered.entries.map((e) => [e.workerId, e.error ? e.error.code : 'ok']), [[0, 'ok'], [1, 'ok'], [2, 'ERR_CLUSTERIZE_BUS_BACKPRESSURE']])

  fs.writeFileSync(unblock, '')
  assert.strictEqual(await blocked, true)
  await eventually(async () => (await run('primary', 'status')).queuedBytes === 0, { timeoutMs: 30000, what: 'the queues to drain once worker 2 reads again' })
  // What it had been sent before it was found stuck arrives, in order.
  const sequence = await eventually(async () => {
    const seen = await run(2, 'sequence')
    return seen.count > 0 && seen
  }, { timeoutMs: 30000, what: 'worker 2 to read its queue' })
  assert.strictEqual(sequence.firstGap, null)
  assert.strictEqual((await cluster.get('/')).status, 200)
})
