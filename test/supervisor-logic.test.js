'use strict'

/**
 * The supervisor's own logic (restart backoff, the crash-loop breaker, warm
 * spares, the drain backstop) with a fake fork: each "worker" is an
 * EventEmitter with send() and process.kill() that the test drives, and
 * time is node:test's mock clock. No process is started here; the same
 * paths with real forked workers are in supervisor.test.js and the cluster
 * tests.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const EventEmitter = require('events')
const protocol = require('../lib/protocol')
const { createSupervisor } = require('./helpers/supervisor')
const { holdPredecessors } = require('../lib/primary/reload')

/** Let exits (emitted on the next tick, as cluster does) and their promise callbacks run. */
const settle = () => new Promise((resolve) => setImmediate(resolve))

/**
 * cluster.fork's stand-in. A child records what the primary sends it, says
 * what the test tells it to, and exits on kill() or when told to.
 */
function fakeFork () {
  const children = []
  let nextPid = 90000
  function fork (env) {
    const child = new EventEmitter()
    child.env = env
    child.received = []
    child.alive = true
    /** On a drain request: 'exit' (drains and exits 0) or 'ignore' (hangs). */
    child.onDrain = 'exit'
    child.process = {
      pid: nextPid++,
      signals: [],
      kill (signal) {
        child.process.signals.push(signal)
        child.exit(null, signal)
      }
    }
    child.isConnected = () => child.alive
    child.send = (message, handle, callback) => {
      if (typeof handle === 'function') callback = handle
      const messages = message.kind === 'batch' ? message.items : [message]
      for (const m of messages) {
        child.received.push(m)
        if (m.kind === protocol.KIND.DRAIN && child.onDrain === 'exit') {
          child.say(protocol.drained(false))
          child.exit(0, null)
        }
      }
      if (callback) process.nextTick(callback, null)
      return true
    }
    child.say = (message) => { if (child.alive) child.emit('message', JSON.parse(JSON.stringify(message))) }
    child.ready = () => {
      child.say(protocol.ready({ handoff: true }))
      child.say(protocol.heartbeat({ rss: 1, eventLoopDelayP99Ms: 1 }))
    }
    child.exit = (code, signal) => {
      if (!child.alive) return
      child.alive = false
      process.nextTick(() => child.emit('exit', code, signal))
    }
    children.push(child)
    return child
  }
  return { fork, children }
}

function startSupervisor (options) {
  const { fork, children } = fakeFork()
  return Object.assign(createSupervisor(options, fork), { children })
}

/** The child behind the worker serving `slot`. */
const childOf = (supervisor, children, slot) => children.find((child) => child.process.pid === supervisor.slots[slot].pid)

/** The delay the supervisor logged for its last scheduled restart of `slot`, or null. */
function loggedDelay (log, slot) {
  const lines = log.lines.filter((line) => line.startsWith(`info restarting worker ${slot} in `))
  return lines.length === 0 ? null : Number(/in (\d+) ms/.exec(lines[lines.length - 1])[1])
}

test('a crashed worker is replaced in its slot at once, then after a growing backoff; a worker that stayed up 30 s starts the count again', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children, log } = startSupervisor({ workers: 1, restart: { backoffInitialMs: 1000, backoffMaxMs: 1500, maxCrashes: 100 } })
  supervisor.start()
  children[0].ready()

  children[0].exit(1, null)
  await settle()
  t.mock.timers.tick(0)
  assert.strictEqual(children.length, 2, 'the first failure is restarted at once')
  assert.strictEqual(loggedDelay(log, 0), null)
  assert.strictEqual(children[1].env.CLUSTERIZE_WORKER_ID, '0')
  assert.strictEqual(supervisor.slots[0].restarts, 1)

  children[1].exit(1, null) // before it was ready: a boot failure, counted the same
  await settle()
  const second = loggedDelay(log, 0)
  assert.ok(second >= 500 && second <= 1000, `the second waits 50-100% of backoffInitialMs, got ${second}`)
  if (second > 0) t.mock.timers.tick(second - 1)
  assert.strictEqual(children.length, 2, 'nothing is forked before the backoff passed')
  assert.strictEqual(supervisor.slots[0], null)
  t.mock.timers.tick(1)
  assert.strictEqual(children.length, 3)
  assert.strictEqual(supervisor.slots[0].restarts, 2)

  children[2].exit(1, null)
  await settle()
  const third = loggedDelay(log, 0)
  assert.ok(third >= 750 && third <= 1500, `the third doubles the step, capped at backoffMaxMs: got ${third}`)
  t.mock.timers.tick(third)
  assert.strictEqual(children.length, 4)

  children[3].ready()
  t.mock.timers.tick(30001)
  log.lines.length = 0
  children[3].exit(1, null)
  await settle()
  t.mock.timers.tick(0)
  assert.strictEqual(children.length, 5, 'a worker that was stable counts as a first failure again')
  assert.strictEqual(loggedDelay(log, 0), null)
  supervisor.stop()
})

test('the breaker trips once per generation; its trip stops respawns only while that generation is the code on disk', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children, log } = startSupervisor({ workers: 3, restart: { backoffInitialMs: 0, backoffMaxMs: 0, maxCrashes: 3, crashWindowMs: 10000 } })
  const loops = []
  supervisor.on('crashloop', (info) => loops.push(info))
  supervisor.start()
  for (const child of children) child.ready()

  // New code on disk (as a reload's canary does): generation 1's failures no longer stop anything.
  const canary = supervisor.spawn(0, 2)
  children[3].ready()
  supervisor.promote(canary)
  for (const old of children.slice(0, 3)) {
    old.exit(1, null)
    await settle()
    t.mock.timers.tick(0)
  }
  assert.strictEqual(loops.length, 1)
  assert.strictEqual(loops[0].generation, 1)
  assert.strictEqual(loops[0].crashes, 3)
  assert.strictEqual(loops[0].workersLeft, 1, 'the canary; the respawned ones are not ready yet')
  assert.strictEqual(supervisor.crashLooping, false, 'generation 1 is not the code on disk any more')
  assert.deepStrictEqual(supervisor.slots.map((record) => record.generation), [2, 2, 2], 'the slots are respawned with the new code')

  // The new code's own failures: its budget is a fresh one, and its trip stops respawns.
  for (let i = 0; i < 3; i++) {
    childOf(supervisor, children, 1).exit(1, null)
    await settle()
    t.mock.timers.tick(0)
  }
  assert.strictEqual(loops.length, 2)
  assert.strictEqual(loops[1].generation, 2)
  assert.strictEqual(supervisor.crashLooping, true)
  assert.strictEqual(supervisor.slots[1], null)
  const forked = children.length
  childOf(supervisor, children, 0).exit(1, null)
  childOf(supervisor, children, 2).exit(1, null)
  await settle()
  t.mock.timers.tick(60000)
  assert.strictEqual(children.length, forked, 'nothing is forked once the code on disk crash-loops')
  assert.strictEqual(loops.length, 2, 'the tripped breaker does not fire again')
  assert.ok(supervisor.isEmpty())
  assert.strictEqual(log.lines.filter((line) => /crash loop: 3 failures of generation 2 within 10000 ms/.test(line)).length, 1)

  supervisor.spawn(0, 3)
  assert.strictEqual(supervisor.crashLooping, false, 'newer code gets its own budget')
  supervisor.stop()
})

test('failures spread wider than restart.crashWindowMs never trip the breaker', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children } = startSupervisor({ workers: 1, restart: { backoffInitialMs: 0, backoffMaxMs: 0, maxCrashes: 2, crashWindowMs: 1000 } })
  const loops = []
  supervisor.on('crashloop', (info) => loops.push(info))
  supervisor.start()
  for (let i = 0; i < 4; i++) {
    children[i].ready()
    t.mock.timers.tick(1001)
    children[i].exit(1, null)
    await settle()
    t.mock.timers.tick(0)
  }
  assert.strictEqual(children.length, 5)
  assert.deepStrictEqual(loops, [])
  supervisor.stop()
})

test('an app that cannot load at first start: one boot-fatal, nothing respawned; a boot error after one was ready is retried', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children } = startSupervisor({ workers: 2, restart: { backoffInitialMs: 0, backoffMaxMs: 0 } })
  const fatal = []
  supervisor.on('boot-fatal', (message) => fatal.push(message))
  supervisor.start()
  const invalid = Object.assign(new Error('cannot find module ./app'), { appInvalid: true })
  for (const child of children.slice()) {
    child.say(protocol.bootError(invalid))
    child.exit(1, null)
  }
  await settle()
  t.mock.timers.tick(60000)
  assert.deepStrictEqual(fatal, ['cannot find module ./app'])
  assert.strictEqual(children.length, 2)
  assert.ok(supervisor.isEmpty())
  assert.throws(() => supervisor.spawn(0, 1), /shutting down/)

  const second = startSupervisor({ workers: 1, restart: { backoffInitialMs: 0, backoffMaxMs: 0 } })
  second.supervisor.on('boot-fatal', (message) => fatal.push(message))
  second.supervisor.start()
  second.children[0].ready()
  second.children[0].exit(1, null)
  await settle()
  t.mock.timers.tick(0)
  second.children[1].say(protocol.bootError(invalid))
  second.children[1].exit(1, null)
  await settle()
  t.mock.timers.tick(0)
  assert.strictEqual(fatal.length, 1, 'the app loaded once: a later boot error is not fatal')
  assert.strictEqual(second.children.length, 3)
  second.supervisor.stop()
})

test('a ready spare takes a dead worker\'s slot at once; the next spare is forked a little later', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children } = startSupervisor({ workers: 1, spare: 1, restart: { backoffInitialMs: 0, backoffMaxMs: 0 } })
  const ready = []
  supervisor.on('worker:ready', (view) => ready.push(view))
  supervisor.start()
  assert.strictEqual(children.length, 2)
  assert.strictEqual(children[1].env.CLUSTERIZE_SPARE, '1')
  assert.strictEqual(children[1].env.CLUSTERIZE_WORKER_ID, '-1')
  children[0].ready()
  children[1].ready()
  assert.deepStrictEqual(ready.map((view) => view.state), ['ready', 'spare'])

  children[0].exit(1, null)
  await settle()
  const promoted = supervisor.slots[0]
  assert.strictEqual(promoted.pid, children[1].process.pid)
  assert.strictEqual(promoted.id, 0)
  assert.strictEqual(promoted.spare, false)
  assert.strictEqual(promoted.restarts, 1)
  assert.ok(children[1].received.some((m) => m.kind === protocol.KIND.PROMOTE && m.slot === 0), 'the spare is told its slot')
  assert.strictEqual(ready[2].state, 'ready')
  t.mock.timers.tick(0)
  assert.strictEqual(children.length, 2, 'no fork for the slot, and the next spare waits')
  t.mock.timers.tick(250)
  assert.strictEqual(children.length, 3)
  assert.strictEqual(children[2].env.CLUSTERIZE_SPARE, '1')
  supervisor.stop()
})

test('retire: the worker is asked to drain; one that does not is killed at the deadline and marked forced', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children } = startSupervisor({ workers: 2 })
  const gone = []
  supervisor.on('record:gone', (record) => gone.push(record.pid))
  supervisor.start()
  children[0].ready()
  children[1].ready()
  supervisor.stop()

  const polite = supervisor.slots[0]
  const exitPolite = await supervisor.retire(polite, 'shutdown', 1000)
  assert.strictEqual(exitPolite.code, 0)
  assert.strictEqual(exitPolite.reason, 'shutdown')
  assert.deepStrictEqual(children[0].process.signals, [])
  assert.strictEqual(polite.forced, false)

  children[1].onDrain = 'ignore'
  const stuck = supervisor.slots[1]
  const exiting = supervisor.retire(stuck, 'shutdown', 1000)
  assert.ok(children[1].received.some((m) => m.kind === protocol.KIND.DRAIN && m.timeoutMs === 1000))
  assert.ok(stuck.isRetiring())
  t.mock.timers.tick(2999)
  assert.deepStrictEqual(children[1].process.signals, [], 'the worker keeps its own deadline, plus a grace')
  t.mock.timers.tick(1)
  assert.deepStrictEqual(children[1].process.signals, ['SIGKILL'])
  const exitStuck = await exiting
  assert.strictEqual(exitStuck.signal, 'SIGKILL')
  assert.strictEqual(stuck.forced, true)
  assert.deepStrictEqual(gone, [children[0].process.pid, children[1].process.pid])
  assert.ok(supervisor.isEmpty())
})

test("a reload's held predecessor stands in for a successor that fails while baking; one that exits when asked gets no stand-in", async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children, log } = startSupervisor({ workers: 2, restart: { backoffInitialMs: 0, backoffMaxMs: 0 } })
  const { promote, release } = holdPredecessors(supervisor, log)
  supervisor.start()
  children[0].ready()
  children[1].ready()
  const [first, second] = supervisor.slotIds().map((slot) => supervisor.current(slot))

  const failing = supervisor.spawn(0, 2)
  children[2].ready()
  promote(failing, true)
  assert.strictEqual(supervisor.current(0), failing)
  assert.ok(first.isReady(), 'the predecessor is kept alive')
  children[2].exit(1, null)
  await settle()
  t.mock.timers.tick(0)
  assert.strictEqual(supervisor.current(0), first, 'the predecessor serves again')
  assert.strictEqual(children.length, 3, 'nothing is respawned')
  assert.strictEqual(release(0), undefined, 'the hold was used up')
  assert.ok(log.lines.some((line) => /^warn worker 0: generation 2 failed while baking; generation 1 \(pid \d+\) serves again$/.test(line)))

  const retired = supervisor.spawn(1, 3)
  children[3].ready()
  promote(retired, true)
  await supervisor.kill(retired, 'reload-failed')
  await settle()
  t.mock.timers.tick(0)
  assert.strictEqual(children.length, 5, 'a worker killed on purpose is respawned, not stood in for')
  assert.strictEqual(supervisor.current(1).generation, 3)
  assert.strictEqual(release(1), second, 'the predecessor is still held, for the reload to retire')
  supervisor.stop()
})

test('a worker that exits in the middle of its drain is not logged as a clean exit; one whose drained message is still in the pipe at its exit is', async () => {
  const { supervisor, children, log } = startSupervisor({ workers: 2 })
  supervisor.start()
  for (const child of children) child.ready()
  const [cut, late] = [childOf(supervisor, children, 0), childOf(supervisor, children, 1)]
  cut.onDrain = 'ignore'
  late.onDrain = 'ignore'
  const exits = [supervisor.retire(supervisor.slots[0], 'shutdown', 5000), supervisor.retire(supervisor.slots[1], 'shutdown', 5000)]

  // The app ended its own process (process.exit in its SIGINT handler): no drained message ever comes.
  cut.exit(0, null)
  // This one said it drained, but the primary sees its exit before reading that message.
  late.isConnected = () => true
  late.emit('exit', 0, null)
  await settle()
  assert.ok(!log.lines.some((line) => line.startsWith('info worker 1 exited')), 'its exit waits for its last messages')
  late.emit('message', JSON.parse(JSON.stringify(protocol.drained(false))))
  late.isConnected = () => false
  late.emit('disconnect')
  await Promise.all(exits)

  assert.ok(log.lines.some((line) => /^warn worker 0 exited \(shutdown\) with code 0 before it finished draining: the app ended its own process/.test(line)), log.lines.join('\n'))
  assert.ok(!log.lines.some((line) => line.startsWith('info worker 0 exited')), log.lines.join('\n'))
  assert.ok(log.lines.includes('info worker 1 exited (shutdown)'), log.lines.join('\n'))
  supervisor.stop()
})
