'use strict'

// The parts a Pool is built from, each on its own: a PoolThread on a real
// worker thread, the task queue, the startup backoff, the pending-task tracker.

const { describe, it, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { once } = require('node:events')
const { PoolThread, STATE } = require('../lib/pool/thread')
const { Task } = require('../lib/pool/records')
const { resolveTask } = require('../lib/pool/task')
const { normalizeOptions } = require('../lib/pool/options')
const TaskQueue = require('../lib/pool/task-queue')
const StartupBackoff = require('../lib/pool/backoff')
const Pending = require('../lib/pool/pending')
const errors = require('../lib/pool/errors')

const tasks = path.join(__dirname, 'fixtures', 'tasks')
const options = normalizeOptions({ threads: 1 })

const threads = []
function thread (opts = options) {
  const th = new PoolThread(threads.length + 1, opts)
  threads.push(th)
  return th
}
// every thread ends, pass or fail
after(() => Promise.all(threads.map((th) => { const exited = th.exited(); th.retire(); return exited })))

// a Task as Pool.exec builds it; the thread never settles it (the pool does)
function task (fn, args, timeoutMs = 0) {
  return new Task(resolveTask(fn), args, undefined, timeoutMs, null, true, noop, noop)
}

function noop () {}

async function ready (th) {
  await once(th, 'ready')
  assert.equal(th.state, STATE.IDLE)
}

describe('PoolThread', () => {
  it('goes starting -> idle -> busy -> idle and reports each result', async () => {
    const th = thread()
    assert.equal(th.state, STATE.STARTING)
    assert.equal(th.starting, true)
    await ready(th)
    const t = task((a, b) => a * b, [6, 7])
    th.run(t)
    assert.equal(th.state, STATE.BUSY)
    assert.equal(th.task, t)
    assert.equal(t.thread, th)
    assert.ok(t.startedAt > 0)
    const [who, which, ok, value] = await once(th, 'done')
    assert.deepEqual([who, which, ok, value], [th, t, true, 42])
    assert.equal(th.state, STATE.IDLE)
    assert.equal(th.task, null)

    th.run(task((m) => { throw new Error(m) }, ['no']))
    const [, , ok2, err] = await once(th, 'done')
    assert.equal(ok2, false)
    assert.ok(err instanceof errors.TaskError)
    assert.equal(err.message, 'no')
  })

  it('an argument that cannot be sent leaves it idle and the task unsent; the next run sends the definition again', async () => {
    const th = thread()
    await ready(th)
    const echo = (a) => a
    assert.throws(() => th.run(task(echo, [Symbol('x')])), /could not be cloned/)
    assert.equal(th.state, STATE.IDLE)
    assert.equal(th.task, null)
    th.run(task(echo, ['again']))
    const [, , ok, value] = await once(th, 'done')
    assert.deepEqual([ok, value], [true, 'again'])
  })

  it('reports a task past its deadline, keeps it until retired, then reports nothing more', async () => {
    const th = thread()
    await ready(th)
    const t = task(() => { for (;;) {} }, [], 20) // eslint-disable-line no-empty
    th.run(t)
    const [who, which] = await once(th, 'timeout')
    assert.deepEqual([who, which], [th, t])
    assert.equal(th.state, STATE.BUSY, 'the pool decides what to do with it')
    const events = []
    for (const name of ['ready', 'done', 'timeout', 'exit', 'startupFailure']) th.on(name, () => events.push(name))
    const exited = th.exited()
    assert.equal(th.retire(), t, 'retire hands back the running task')
    assert.equal(th.state, STATE.RETIRING)
    assert.equal(th.retire(), null, 'idempotent')
    await exited
    await th.exited() // resolves after the exit too
    assert.deepEqual(events, [])
  })

  it('a thread that dies under a task reports it with the task and a ThreadExitError', async () => {
    const th = thread()
    await ready(th)
    const t = task((code) => process.exit(code), [3])
    th.run(t)
    const [who, which, code] = await once(th, 'exit')
    assert.deepEqual([who, which, code], [th, t, 3])
    assert.equal(th.state, STATE.RETIRING)
    const err = th.crashError(code)
    assert.ok(err instanceof errors.ThreadExitError)
    assert.equal(err.exitCode, 3)
    assert.match(err.message, /exited with code 3/)
  })

  it('a thread that fails before it is ready reports startupFailure with the reason, not exit', async () => {
    const th = thread(normalizeOptions({ threads: 1, setup: path.join(tasks, 'bad-setup.js') }))
    let exited = false
    th.on('exit', () => { exited = true })
    const [who, reason] = await once(th, 'startupFailure')
    assert.equal(who, th)
    assert.match(reason, /setup exploded/)
    assert.equal(th.state, STATE.RETIRING)
    assert.equal(exited, false)
  })

  it('retiring a starting thread: it never reports ready or a failure', async () => {
    const th = thread()
    const events = []
    for (const name of ['ready', 'exit', 'startupFailure']) th.on(name, () => events.push(name))
    const exited = th.exited()
    assert.equal(th.retire(), null)
    await exited
    assert.deepEqual(events, [])
  })
})

describe('TaskQueue', () => {
  const t = (name) => ({ name, done: false })

  it('gives live tasks oldest first and skips the cancelled ones', () => {
    const q = new TaskQueue()
    const [a, b, c] = [t('a'), t('b'), t('c')]
    q.push(a)
    q.push(b)
    q.push(c)
    b.done = true
    q.cancelled()
    assert.equal(q.length, 2)
    assert.equal(q.shift(), a)
    assert.equal(q.shift(), c)
    assert.equal(q.shift(), undefined)
    assert.equal(q.length, 0)
  })

  it('drops cancelled leftovers once no live task is left', () => {
    const q = new TaskQueue()
    for (let i = 0; i < 40; i++) q.push(t(i))
    for (let i = 0; i < 40; i++) q.cancelled()
    assert.equal(q.shift(), undefined)
    assert.equal(q._ring.length, 0)
    const d = t('d')
    q.push(d)
    assert.equal(q.shift(), d)
  })
})

describe('StartupBackoff', () => {
  it('respawns after each failure until the limit, then gives up; a ready thread resets the streak', async () => {
    const b = new StartupBackoff(3)
    let respawned = 0
    const respawn = () => { respawned++ }
    assert.equal(b.failed(respawn), true)
    await new Promise((resolve) => b.failed(resolve) || assert.fail('second failure still respawns'))
    assert.equal(b.failures, 2)
    assert.equal(b.failed(respawn), false, 'the third failure in a row gives up')
    b.reset()
    assert.equal(b.failures, 0)
    assert.equal(b.failed(respawn), true)
    b.cancel()
    // a timer set after the cancelled one (50 ms) fires after it would have
    await new Promise((resolve) => setTimeout(resolve, 60))
    assert.equal(respawned, 1, 'only the first respawn ran: the third gave up and the fourth was cancelled')
  })
})

describe('Pending', () => {
  it('drains when the last task settles, or says it did not at the deadline', async () => {
    const p = new Pending()
    try {
      assert.equal(await p.drained(1000), true, 'nothing pending')
      p.add()
      p.add()
      const drained = p.drained(2 ** 31 - 1)
      p.settled()
      p.settled()
      assert.equal(await drained, true)
      p.add()
      assert.equal(await p.drained(0), false)
      p.settled()
      assert.equal(p.count, 0)
    } finally {
      p.stop()
    }
  })
})
