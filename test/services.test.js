'use strict'

/**
 * lib/services: a primary-side host in this process and a worker's client in
 * a forked child, over the real IPC channel: answers, a handler that throws,
 * timeouts, backpressure, a worker that dies mid-request, the primary going
 * away, notifications, one write per loop turn; and in-process calls.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { fork } = require('child_process')
const path = require('path')
const ipc = require('../lib/ipc')
const protocol = require('../lib/protocol')
const { createServiceHost } = require('../lib/services/host')
const { eventually } = require('./helpers/wait')

const children = []
after(() => { for (const child of children) child.kill('SIGKILL') })

/** A controllable service: 'hang' calls wait until the test releases them. */
function testService () {
  const seen = { notes: [], exits: [], hanging: [], calls: 0, push: null }
  const definition = {
    name: 'test',
    start: function startTestService (context) {
      seen.push = context.push
      return {
        requests: {
          echo: (data, caller) => ({ data, from: caller.id, pid: caller.pid }),
          fail: () => { throw Object.assign(new Error('the service refused'), { code: 'E_TEST_REFUSED', status: 418 }) },
          reject: () => Promise.reject(new Error('rejected later')),
          hang: (data) => {
            seen.calls++
            return new Promise((resolve) => seen.hanging.push(() => resolve(data)))
          }
        },
        notifications: {
          note: (data, caller) => { seen.notes.push([data, caller.id]) },
          boom: () => { throw new Error('a notification handler bug') }
        },
        workerExit: (caller) => seen.exits.push(caller.pid)
      }
    }
  }
  return { definition, seen }
}

function startWorker (env) {
  const { definition, seen } = testService()
  const errors = []
  const host = createServiceHost([definition], { log: { error: (message) => errors.push(message) } })
  const child = fork(path.join(__dirname, 'fixtures/services-worker.js'), { env: Object.assign({}, process.env, env), stdio: ['ignore', 'pipe', 'inherit', 'ipc'] })
  children.push(child)
  const record = { id: 3, pid: child.pid, generation: 1, channel: new ipc.Channel(child) }
  host.addWorker(record)
  const writes = []
  const outcomes = new Map()
  let stdout = ''
  child.stdout.on('data', (chunk) => { stdout += chunk })
  child.on('message', (message) => {
    if (message && message.type === 'outcome') outcomes.set(message.tag, message)
    else if (message && message.$cz === 1) writes.push(message)
  })
  ipc.listen(child, (message) => {
    if (message.kind === protocol.KIND.SERVICE) host.onWorkerMessage(record, message)
  })
  let tags = 0
  function run (command) {
    const tag = `t${tags++}`
    child.send(Object.assign({ tag }, command))
    return eventually(() => outcomes.get(tag), { what: `the outcome of ${JSON.stringify(command)}` })
  }
  return { host, child, record, seen, errors, writes, outcomes, run, stdout: () => stdout }
}

test('a call is answered by the service in the primary, with the caller named', async () => {
  const worker = startWorker()
  const outcome = await worker.run({ cmd: 'request', method: 'echo', data: { sess: '{"a":1}' } })
  assert.deepStrictEqual(outcome.value, { data: { sess: '{"a":1}' }, from: 3, pid: worker.child.pid })
})

test('a service pushes to one worker by pid; its client\'s onPush handler runs there; an unknown pid gets false', async () => {
  const worker = startWorker()
  await worker.run({ cmd: 'request', method: 'echo', data: 0 })
  assert.strictEqual(worker.seen.push(worker.child.pid, 'revoke', ['k', 7]), true)
  await eventually(() => worker.seen.notes.length === 1)
  assert.deepStrictEqual(worker.seen.notes[0], [{ pushed: 'revoke', data: ['k', 7] }, 3])
  assert.strictEqual(worker.seen.push(worker.child.pid + 100000, 'revoke', []), false)
})

test('a handler that throws or rejects fails the call with its message and code; an unknown method is refused', async () => {
  const worker = startWorker()
  const thrown = await worker.run({ cmd: 'request', method: 'fail' })
  assert.strictEqual(thrown.error.message, 'the service refused')
  assert.strictEqual(thrown.error.code, 'E_TEST_REFUSED')
  assert.strictEqual(thrown.error.status, 418)
  const rejected = await worker.run({ cmd: 'request', method: 'reject' })
  assert.strictEqual(rejected.error.message, 'rejected later')
  const unknown = await worker.run({ cmd: 'request', method: 'nonsense' })
  assert.strictEqual(unknown.error.code, 'ERR_CLUSTERIZE_BUS_NO_HANDLER')
  // The primary is still there and answering.
  assert.ok((await worker.run({ cmd: 'request', method: 'echo', data: 1 })).value)
})

test('a call the primary does not answer in time fails with a timeout; its late answer is ignored', async () => {
  const worker = startWorker()
  const outcome = await worker.run({ cmd: 'request', method: 'hang', data: 'late', timeoutMs: 50 })
  assert.strictEqual(outcome.error.code, 'ERR_CLUSTERIZE_BUS_TIMEOUT')
  worker.seen.hanging.shift()()
  const next = await worker.run({ cmd: 'request', method: 'echo', data: 'next' })
  assert.strictEqual(next.value.data, 'next', 'the late answer did not settle the next call')
})

test('backpressure: calls waiting for answers are bounded by maxQueuedBytes; answers make room again', async () => {
  // 200 bytes + 64 overhead each: three fit in 1000 bytes, the fourth does not.
  const worker = startWorker({ MAX_QUEUED_BYTES: '1000' })
  const waiting = [0, 1, 2].map((i) => worker.run({ cmd: 'request', method: 'hang', data: i, bytes: 200 }))
  await eventually(() => worker.seen.calls === 3)
  const refused = await worker.run({ cmd: 'request', method: 'hang', data: 3, bytes: 200 })
  assert.strictEqual(refused.error.code, 'ERR_CLUSTERIZE_BUS_BACKPRESSURE')
  assert.strictEqual(worker.seen.calls, 3, 'the refused call was never sent')
  for (const release of worker.seen.hanging.splice(0)) release()
  assert.deepStrictEqual((await Promise.all(waiting)).map((o) => o.value), [0, 1, 2])
  const again = worker.run({ cmd: 'request', method: 'hang', data: 4, bytes: 200 })
  await eventually(() => worker.seen.calls === 4)
  worker.seen.hanging.shift()()
  assert.strictEqual((await again).value, 4)
})

test('a worker that dies mid-request: its answer is dropped, the services forget it, the host keeps serving', async () => {
  const worker = startWorker()
  worker.child.send({ cmd: 'request', tag: 'dying', method: 'hang', data: 'never read' })
  await eventually(() => worker.seen.calls === 1)
  worker.child.kill('SIGKILL')
  await new Promise((resolve) => worker.child.once('exit', resolve))
  worker.host.removeWorker(worker.record)
  assert.deepStrictEqual(worker.seen.exits, [worker.child.pid])
  const posted = worker.record.channel.queue.length
  worker.seen.hanging.shift()()
  await new Promise((resolve) => setImmediate(resolve))
  assert.strictEqual(worker.record.channel.queue.length, posted, 'no answer posted to the dead worker')
  const other = startWorker()
  assert.strictEqual((await other.run({ cmd: 'request', method: 'echo', data: 'alive' })).value.data, 'alive')
})

test('a worker reported gone while its channel is still open: the services forget it once the channel closes', async () => {
  const worker = startWorker()
  const child = worker.child
  // As cluster.Worker: Node reports a worker's exit as soon as it is reaped, which can come before
  // the last messages it wrote are read (a session save it already answered, say).
  worker.record.worker = { isConnected: () => child.connected, once: child.once.bind(child), removeListener: child.removeListener.bind(child) }
  assert.strictEqual((await worker.run({ cmd: 'request', method: 'echo', data: 'up' })).value.data, 'up')
  worker.host.removeWorker(worker.record)
  assert.deepStrictEqual(worker.seen.exits, [], 'not forgotten while its messages can still arrive')
  const closed = new Promise((resolve) => child.once('disconnect', resolve))
  child.kill('SIGKILL')
  await closed
  assert.deepStrictEqual(worker.seen.exits, [child.pid])
})

test('the primary going away fails the calls still waiting at once (not at their timeout)', async () => {
  const worker = startWorker()
  worker.child.send({ cmd: 'request', tag: 'orphan', method: 'hang', timeoutMs: 600000 })
  await eventually(() => worker.seen.calls === 1)
  worker.child.disconnect()
  const line = await eventually(() => worker.stdout().split('\n').find((l) => l.includes('"orphan"')))
  assert.strictEqual(JSON.parse(line).error.code, 'ERR_CLUSTERIZE_BUS_CLOSED')
})

test("the app's data (encode): refused at once when the bus would refuse it, without breaking the write it would have shared", async () => {
  const worker = startWorker()
  const outcome = await worker.run({ cmd: 'app-data' })
  assert.strictEqual(outcome.value.refused.code, 'ERR_CLUSTERIZE_BUS_UNSERIALISABLE')
  assert.deepStrictEqual(outcome.value.value.data, { when: '1970-01-01T00:00:00.000Z', buf: [1, 2] })
})

test('notifications reach their handler with the caller; one that throws is logged and breaks nothing', async () => {
  const worker = startWorker()
  await worker.run({ cmd: 'notify', method: 'boom' })
  await worker.run({ cmd: 'notify', method: 'note', data: { n: 1 } })
  await eventually(() => worker.seen.notes.length === 1)
  assert.deepStrictEqual(worker.seen.notes, [[{ n: 1 }, 3]])
  assert.match(worker.errors.join('\n'), /a notification handler bug/)
})

test('calls made in one loop turn share one IPC write, and so do their answers', async () => {
  const worker = startWorker()
  const writesBefore = []
  worker.child.on('message', (message) => { if (message && message.$cz === 1) writesBefore.push(message) })
  const answerWrites = []
  const write = worker.record.channel.write
  worker.record.channel.write = function countedWrite (message) {
    answerWrites.push(message)
    return write.apply(this, arguments)
  }
  worker.child.send({ cmd: 'burst', tag: 'b', method: 'echo', count: 5 })
  await eventually(() => [0, 1, 2, 3, 4].every((i) => worker.outcomes.has(`b:${i}`)))
  const calls = writesBefore.filter((m) => m.kind === 'batch' || m.kind === protocol.KIND.SERVICE)
  assert.strictEqual(calls.length, 1, 'five calls, one write')
  assert.strictEqual(calls[0].items.length, 5)
  assert.deepStrictEqual(calls[0].items[0].d, { i: 0 }, 'plain data: encoded once, by the channel')
  assert.strictEqual(answerWrites.length, 1, 'five answers, one write')
  assert.strictEqual(answerWrites[0].items.length, 5)
})

test('in-process: with the host in this process a client calls it directly, with the same errors', async () => {
  const services = require('../lib/services')
  const { definition, seen } = testService()
  const host = services.startServices({ config: {}, log: undefined }, [definition])
  after(() => services.closeServices())
  const client = services.serviceClient('test')
  assert.deepStrictEqual(await client.request('echo', 'x'), { data: 'x', from: 0, pid: process.pid })
  await assert.rejects(client.request('fail'), { code: 'E_TEST_REFUSED' })
  await assert.rejects(client.request('nonsense'), { code: 'ERR_CLUSTERIZE_BUS_NO_HANDLER' })
  await assert.rejects(client.request('hang', 1, { timeoutMs: 20 }), { code: 'ERR_CLUSTERIZE_BUS_TIMEOUT' })
  assert.strictEqual(client.notify('note', 7), true)
  assert.deepStrictEqual(seen.notes, [], 'never inside the sender\'s call')
  await new Promise((resolve) => process.nextTick(resolve))
  assert.deepStrictEqual(seen.notes, [[7, 0]])
  assert.strictEqual(services.localService('test'), host.get('test'))
})
