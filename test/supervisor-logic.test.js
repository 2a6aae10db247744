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

test('a crashed worker is replaced in its slot at once, then after a growing backoff; a worker that stayed up restart.stableAfterMs starts the count again', async (t) => {
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
  t.mock.timers.tick(5000) // restart.stableAfterMs, by default
  log.lines.length = 0
  children[3].exit(1, null)
  await settle()
  t.mock.timers.tick(0)
  assert.strictEqual(children.length, 5, 'a worker that was stable counts as a first failure again')
  assert.strictEqual(loggedDelay(log, 0), null)
  supervisor.stop()
})

test('the breaker trips once per generation; while the code on disk is tripped failed slots are retried at the capped backoff, and a retry that stays up closes it', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children, log } = startSupervisor({ workers: 3, restart: { backoffInitialMs: 0, backoffMaxMs: 1000, maxCrashes: 3, crashWindowMs: 10000, stableAfterMs: 5000 } })
  const loops = []
  supervisor.on('crashloop', (info) => loops.push(info))
  supervisor.start()
  for (const child of children) child.ready()

  // New code on disk (as a reload's canary does): generation 1's failures no longer hold anything back.
  const canary = supervisor.spawn(0, 2)
  children[3].ready()
  supervisor.promote(canary)
  for (const old of children.slice(0, 3)) {
    old.exit(1, null) // soon after ready: failed starts, counted by the breaker
    await settle()
    t.mock.timers.tick(0)
  }
  assert.strictEqual(loops.length, 1)
  assert.strictEqual(loops[0].generation, 1)
  assert.strictEqual(loops[0].crashes, 3)
  assert.strictEqual(loops[0].workersLeft, 1, 'the canary; the respawned ones are not ready yet')
  assert.strictEqual(supervisor.crashLooping, false, 'generation 1 is not the code on disk any more')
  assert.deepStrictEqual(supervisor.slots.map((record) => record.generation), [2, 2, 2], 'the slots are respawned with the new code')

  // The new code's own failures: its budget is a fresh one, and its trip opens the breaker.
  for (let i = 0; i < 3; i++) {
    const child = childOf(supervisor, children, 1)
    if (child.alive) child.ready()
    child.exit(1, null)
    await settle()
    t.mock.timers.tick(supervisor.crashLooping ? 0 : 1000)
  }
  assert.strictEqual(loops.length, 2)
  assert.strictEqual(loops[1].generation, 2)
  assert.strictEqual(supervisor.crashLooping, true)
  assert.strictEqual(supervisor.gaveUp, false, 'workers were ready: the primary never gives up')
  assert.ok(log.lines.some((line) => /^error crash loop: 3 failures of generation 2 within 10000 ms; the breaker is open: \d+ worker\(s\) keep serving, \/ready answers 503/.test(line)))
  assert.strictEqual(supervisor.slots[1], null, 'the failed slot waits for the capped backoff')
  const retryLine = log.lines.filter((line) => line.startsWith('warn crash loop: retrying worker 1 in ')).pop()
  const retryMs = Number(/in (\d+) ms/.exec(retryLine)[1])
  assert.ok(retryMs >= 500 && retryMs <= 1000, `50-100% of backoffMaxMs, got ${retryMs}`)
  const forked = children.length
  t.mock.timers.tick(retryMs)
  assert.strictEqual(children.length, forked + 1, 'retried, not given up')
  assert.strictEqual(supervisor.slots[1].generation, 2)

  const retried = childOf(supervisor, children, 1)
  retried.ready()
  t.mock.timers.tick(4999)
  retried.say(protocol.heartbeat({ rss: 1, eventLoopDelayP99Ms: 1 }))
  assert.strictEqual(supervisor.crashLooping, true, 'not up restart.stableAfterMs yet')
  t.mock.timers.tick(1)
  retried.say(protocol.heartbeat({ rss: 1, eventLoopDelayP99Ms: 1 }))
  assert.strictEqual(supervisor.crashLooping, false, 'a worker of that code stayed up: the breaker closes')
  assert.ok(log.lines.some((line) => /^info crash loop over: worker 1 \(generation 2\) stayed up 5000 ms/.test(line)))
  assert.strictEqual(loops.length, 2, 'the breaker fires once per trip')

  supervisor.spawn(0, 3)
  assert.strictEqual(supervisor.crashLooping, false, 'newer code gets its own budget')
  supervisor.stop()
})

test('a worker that stayed up restart.stableAfterMs and crashes is a request-level fault: restarted at once, counted, never trips the breaker', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children, log } = startSupervisor({ workers: 1, health: { heartbeatMs: 100 }, restart: { backoffInitialMs: 1000, backoffMaxMs: 10000, maxCrashes: 2, crashWindowMs: 60000, stableAfterMs: 2000 } })
  const loops = []
  supervisor.on('crashloop', (info) => loops.push(info))
  supervisor.start()
  for (let i = 0; i < 6; i++) {
    children[i].ready()
    t.mock.timers.tick(2000)
    children[i].exit(3, null)
    await settle()
    t.mock.timers.tick(0)
    assert.strictEqual(children.length, i + 2, `crash ${i + 1} is restarted at once`)
  }
  assert.deepStrictEqual(loops, [])
  assert.strictEqual(supervisor.crashLooping, false)
  assert.deepStrictEqual(supervisor.failureCounts, { request: 6, start: 0, fork: 0 })
  assert.strictEqual(loggedDelay(log, 0), null, 'no backoff delay was ever logged')

  // A hang is judged by its last heartbeat: one that stopped beating 500 ms after ready failed to stay up.
  const hung = supervisor.slots[0]
  children[6].ready()
  t.mock.timers.tick(500)
  children[6].say(protocol.heartbeat({ rss: 1, eventLoopDelayP99Ms: 1 }))
  t.mock.timers.tick(10000)
  await supervisor.kill(hung, 'hang', 'sent no heartbeat')
  assert.deepStrictEqual(supervisor.failureCounts, { request: 6, start: 1, fork: 0 })
  supervisor.stop()
})

test('a worker that never reports ready is killed at reload.readyTimeoutMs and handled as a failed start', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children, log } = startSupervisor({ workers: 1, reload: { readyTimeoutMs: 3000 }, restart: { backoffInitialMs: 0, backoffMaxMs: 0 } })
  const exits = []
  supervisor.on('worker:exit', (event) => exits.push(event))
  supervisor.start()
  t.mock.timers.tick(2999)
  assert.deepStrictEqual(children[0].process.signals, [])
  t.mock.timers.tick(1)
  assert.deepStrictEqual(children[0].process.signals, ['SIGKILL'])
  await settle()
  assert.strictEqual(exits[0].reason, 'boot-failure')
  assert.ok(log.lines.includes('error worker 0 was not ready within 3000 ms (reload.readyTimeoutMs): killing it'), log.lines.join('\n'))
  assert.ok(log.lines.some((line) => /^error worker 0 failed to boot: it was not ready within 3000 ms/.test(line)))
  assert.deepStrictEqual(supervisor.failureCounts, { request: 0, start: 1, fork: 0 })
  t.mock.timers.tick(0)
  assert.strictEqual(children.length, 2, 'retried')
  children[1].ready()
  t.mock.timers.tick(60000)
  assert.deepStrictEqual(children[1].process.signals, [], 'a worker that became ready is not watched any more')
  supervisor.stop()
})

test('a fork whose spawn fails (no pid, no exit ever) is a failed start: its record exits, the slot is retried with backoff, and counted', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children, log } = startSupervisor({ workers: 2, restart: { backoffInitialMs: 1000, backoffMaxMs: 1000 } })
  supervisor.start()
  children[0].ready()
  children[1].ready()
  const failing = { next: true }
  const fork = supervisor.runtime.fork
  supervisor.runtime.fork = (env) => {
    const child = fork(env)
    if (failing.next) {
      child.process.pid = undefined
      process.nextTick(() => child.emit('error', Object.assign(new Error('spawn node EMFILE'), { code: 'EMFILE' })))
    }
    return child
  }
  t.mock.timers.tick(5000) // restart.stableAfterMs: the crash below is a request-level fault
  children[1].exit(null, 'SIGKILL')
  await settle()
  t.mock.timers.tick(0)
  await settle()
  const phantom = supervisor.slots[1]
  assert.strictEqual(phantom, null, 'no record without a process is left in the slot')
  assert.deepStrictEqual(supervisor.failureCounts, { request: 1, start: 0, fork: 1 })
  assert.deepStrictEqual(Array.from(supervisor.forkFailing), [1])
  assert.ok(log.lines.some((line) => /^error could not fork worker 1: spawn node EMFILE \(the primary is out of file descriptors/.test(line)), log.lines.join('\n'))
  assert.ok(supervisor.liveRecords().every((record) => record.pid !== undefined))
  failing.next = false
  t.mock.timers.tick(1000)
  assert.ok(supervisor.slots[1], 'retried after the backoff')
  childOf(supervisor, children, 1).ready()
  assert.deepStrictEqual(Array.from(supervisor.forkFailing), [], 'a ready worker fills the slot again')

  // A fork that throws at once is retried the same way.
  supervisor.runtime.fork = () => { throw Object.assign(new Error('spawn EPERM'), { code: 'EPERM' }) }
  t.mock.timers.tick(5000)
  childOf(supervisor, children, 0).exit(null, 'SIGKILL')
  await settle()
  t.mock.timers.tick(0)
  assert.strictEqual(supervisor.slots[0], null)
  assert.strictEqual(supervisor.failureCounts.fork, 2)
  assert.ok(log.lines.includes('error could not fork worker 0: spawn EPERM'))
  supervisor.runtime.fork = fork
  t.mock.timers.tick(1000)
  assert.ok(supervisor.slots[0], 'retried after the backoff')
  supervisor.stop()
})

test('a warm spare whose fork throws is retried after a pause, not in a tight loop, and never throws out of a timer', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1000000 })
  const { supervisor, children, log } = startSupervisor({ workers: 1, spare: 1, restart: { backoffInitialMs: 0, backoffMaxMs: 0 } })
  const fork = supervisor.runtime.fork
  let refuse = true
  supervisor.runtime.fork = (env) => {
    if (env.CLUSTERIZE_SPARE === '1' && refuse) throw Object.assign(new Error('spawn EAGAIN'), { code: 'EAGAIN' })
    return fork(env)
  }
  supervisor.start()
  assert.strictEqual(children.length, 1, 'the slot is forked; the spare is not')
  assert.strictEqual(supervisor.failureCounts.fork, 1)
  assert.ok(log.lines.includes('error could not fork a warm spare: spawn EAGAIN'))
  t.mock.timers.tick(250)
  assert.strictEqual(supervisor.failureCounts.fork, 2, 'retried once after the pause')
  refuse = false
  t.mock.timers.tick(250)
  assert.strictEqual(children.length, 2)
  assert.strictEqual(children[1].env.CLUSTERIZE_SPARE, '1')
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
