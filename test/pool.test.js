'use strict'

const { describe, it, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { createPool } = require('../lib/pool')
const registry = require('../lib/pool/registry')
const { defaultThreads, normalizeOptions } = require('../lib/pool/options')
const offload = require('../middleware/offload')
const errors = require('../lib/pool/errors')
const { untilStats: until } = require('./helpers/wait')

const tasks = path.join(__dirname, 'fixtures', 'tasks')
const ops = (name) => offload.task(path.join(tasks, 'ops.js'), name)
const createPoolOptionsThreads = () => normalizeOptions({}).threads

const pools = []
function pool (options) {
  const p = createPool(options)
  pools.push(p)
  return p
}
after(() => Promise.all(pools.map((p) => p.close({ timeoutMs: 1000 }))))

describe('results', () => {
  const p = pool({ threads: 2 })

  it('runs sync and async inline functions', async () => {
    assert.equal(await p.run((a, b) => a * b, 6, 7), 42)
    assert.equal(await p.run(async (a) => { await new Promise((resolve) => setTimeout(resolve, 5)); return a + 1 }, 41), 42)
    assert.deepEqual(await p.run(function named (o) { return { ...o, ok: true } }, { a: 1 }), { a: 1, ok: true })
    const obj = { double (n) { return n * 2 } }
    assert.equal(await p.run(obj.double, 21), 42)
  })

  it('gives inline functions require()', async () => {
    const hex = await p.run((s) => require('node:crypto').createHash('sha256').update(s).digest('hex'), 'x')
    assert.equal(hex, require('node:crypto').createHash('sha256').update('x').digest('hex'))
  })

  it('runs module tasks: named, default, module.exports fallback, async, ESM', async () => {
    assert.equal(await p.run(ops(), 2, 3), 5)
    assert.equal(await p.run(ops('slowAdd'), 2, 3), 5)
    assert.equal(await p.run(offload.task(path.join(tasks, 'square.js')), 9), 81)
    assert.equal(await p.run(offload.task(path.join(tasks, 'triple.mjs')), 5), 15)
  })

  it('runs many tasks with the same inline function and distinct ones', async () => {
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) => p.run((n) => n + 1, i)))
    assert.deepEqual(results, Array.from({ length: 100 }, (_, i) => i + 1))
    assert.equal(await p.run((n) => n - 1, 1), 0)
  })

  it("errors carry the task's message, code and status", async () => {
    await assert.rejects(p.run(ops('fail'), 'nope'), (err) => {
      assert.ok(err instanceof errors.TaskError)
      assert.equal(err.message, 'nope')
      assert.equal(err.code, 'E_TASK_FAILED')
      assert.equal(err.status, 500)
      assert.match(err.stack, /fail/)
      return true
    })
    await assert.rejects(p.run(async () => { throw new TypeError('async nope') }), { message: 'async nope', status: 500 })
    await assert.rejects(p.run(ops('badRequest')), { message: 'invalid input', status: 400 })
    assert.equal(await p.run((a) => a, 'still serving'), 'still serving')
  })

  it('rejects closure-capturing functions with a clear error naming the variable', async () => {
    const secret = 'outer'
    await assert.rejects(p.run((s) => s + secret, 'x'), (err) => {
      assert.ok(err instanceof errors.OuterVariableError)
      assert.ok(err.message.includes('offloaded functions cannot use outer variables; pass them as arguments'))
      assert.ok(err.message.includes('"secret"'))
      assert.equal(err.variable, 'secret')
      return true
    })
  })

  it('rejects native, bound and class tasks with a clear error', async () => {
    await assert.rejects(p.run(Math.max, 1), /native or bound function "max"/)
    await assert.rejects(p.run(((a) => a).bind(null), 1), /native or bound function/)
    await assert.rejects(p.run(class Foo {}), /cannot run class "Foo"/)
    await assert.rejects(p.run('nope'), errors.InvalidTaskError)
  })

  it('names the argument that cannot be cloned, and an uncloneable result', async () => {
    await assert.rejects(p.run((a, b) => a, 1, () => 2), (err) => {
      assert.ok(err instanceof errors.CloneError)
      assert.match(err.message, /^offload argument 2 cannot be cloned: .*pass plain data/)
      assert.equal(err.position, 2)
      return true
    })
    await assert.rejects(p.run(ops('uncloneableResult')), /offload result cannot be cloned/)
    assert.equal(await p.run((a) => a, 1), 1)
  })

  it('an uncloneable queued task fails alone when it reaches a thread', async () => {
    const q = pool({ threads: 1 })
    const running = q.run(ops('sleep'), 50, 'first')
    const bad = q.run((a) => a, Symbol('nope'))
    const good = q.run((a) => a, 'third')
    await assert.rejects(bad, /offload argument 1 cannot be cloned/)
    assert.deepEqual(await Promise.all([running, good]), ['first', 'third'])
    assert.equal(q.stats().busy, 0)
    assert.equal(q.stats().idle, 1)
  })

  it('transfers buffers marked with offload.transfer()', async () => {
    const bytes = new Uint8Array(1024).fill(1)
    const total = await p.run(ops('sum'), offload.transfer(bytes.buffer))
    assert.equal(total, 1024)
    assert.equal(bytes.byteLength, 0) // moved, not copied
    const back = await p.run(ops('fill'), 16, 7)
    assert.ok(back instanceof Uint8Array)
    assert.equal(back.length, 16)
    assert.equal(back[15], 7)
  })

  it('stats() reports counts and percentiles', () => {
    const s = p.stats()
    assert.equal(s.threads, 2)
    assert.equal(s.busy, 0)
    assert.equal(s.queued, 0)
    assert.ok(s.completed > 100)
    assert.ok(s.failed >= 4)
    assert.equal(typeof s.waitTime.p50, 'number')
    assert.equal(typeof s.runTime.p99, 'number')
  })
})

describe('failure isolation', () => {
  it('a task that loops forever times out; its thread is replaced; the next task succeeds', async () => {
    const p = pool({ threads: 1, taskTimeoutMs: 200 })
    await assert.rejects(p.run(ops('spinForever')), (err) => {
      assert.ok(err instanceof errors.TaskTimeoutError)
      assert.equal(err.status, 503)
      return true
    })
    assert.equal(await p.run((a) => a * 2, 21), 42)
    const s = p.stats()
    assert.equal(s.timedOut, 1)
    assert.equal(s.replaced, 1)
    assert.equal(s.threads, 1)
  })

  it('the timeout counts from dispatch, not from enqueue', async () => {
    // Each task sleeps 2 s; the second waits at least 2 s in the queue, so it
    // ends at least 4 s after it was queued: past the 3.8 s timeout if that
    // counted from enqueue. Counted from dispatch, a task fails only if a
    // loaded box stretches its 2 s sleep by 90% (a sleep never shortens).
    const p = pool({ threads: 1, taskTimeoutMs: 3800 })
    const [a, b] = await Promise.all([p.run(ops('sleep'), 2000), p.run(ops('sleep'), 2000)])
    assert.deepEqual([a, b], [2000, 2000])
    assert.equal(p.stats().timedOut, 0)
  })

  it('per-call timeoutMs overrides the pool default', async () => {
    const p = pool({ threads: 1 })
    await assert.rejects(p.exec(ops('spinForever'), [], { timeoutMs: 100 }), errors.TaskTimeoutError)
    assert.equal(await p.run((a) => a, 'ok'), 'ok')
  })

  it('process.exit() in a task fails only that task', async () => {
    const p = pool({ threads: 2 })
    const others = [p.run(ops('slowAdd'), 1, 1, 50), p.run(ops('slowAdd'), 2, 2, 50)]
    const dying = p.run(ops('exit'), 3)
    await assert.rejects(dying, (err) => {
      assert.ok(err instanceof errors.ThreadExitError)
      assert.equal(err.exitCode, 3)
      assert.match(err.message, /exited with code 3/)
      return true
    })
    assert.deepEqual(await Promise.all(others), [2, 4])
    assert.equal(await p.run((a) => a, 'next'), 'next')
    await until(p, (s) => s.threads === 2)
    assert.equal(p.stats().crashed, 1)
  })

  it('an uncaught asynchronous throw fails only its task', async () => {
    const p = pool({ threads: 2 })
    const other = p.run(ops('slowAdd'), 20, 22, 100)
    await assert.rejects(p.run(ops('crashLater'), 'kaboom'), /crashed while running the task: kaboom/)
    assert.equal(await other, 42)
    assert.equal(await p.run((a) => a, 'next'), 'next')
  })

  it('threads that fail at startup stop respawning and report why', async () => {
    const p = pool({ threads: 1, setup: path.join(tasks, 'bad-setup.js'), maxStartupFailures: 2 })
    await assert.rejects(p.run((a) => a, 1), (err) => {
      assert.ok(err instanceof errors.ThreadStartupError)
      assert.match(err.message, /setup exploded/)
      assert.equal(err.status, 503)
      return true
    })
    assert.match(p.stats().broken, /setup exploded/)
    assert.equal(p.stats().threads, 0)
    await assert.rejects(p.run((a) => a, 1), errors.ThreadStartupError)
  })

  it('runs a setup module in each thread before it takes tasks', async () => {
    const p = pool({ threads: 1, setup: path.join(tasks, 'setup.js') })
    assert.equal(await p.run(() => globalThis.setupRan), true)
  })
})

describe('queue and cancellation', () => {
  it('a full queue rejects at once with 503 and retryAfter, and the pool keeps serving', async () => {
    const p = pool({ threads: 1, maxQueue: 1 })
    const running = p.run(ops('sleep'), 100)
    const queued = p.run(ops('sleep'), 10)
    await assert.rejects(p.run(ops('sleep'), 10), (err) => {
      assert.ok(err instanceof errors.QueueFullError)
      assert.equal(err.status, 503)
      assert.ok(err.retryAfter >= 1)
      assert.equal(err.headers['Retry-After'], String(err.retryAfter))
      return true
    })
    assert.deepEqual(await Promise.all([running, queued]), [100, 10])
    assert.equal(await p.run((a) => a, 'served'), 'served')
    assert.equal(p.stats().rejected, 1)
  })

  it('an aborted queued task is removed from the queue', async () => {
    const p = pool({ threads: 1 })
    const running = p.run(ops('sleep'), 100)
    const ac = new AbortController()
    const queued = p.exec((a) => a, [1], { signal: ac.signal })
    await until(p, (s) => s.queued === 1)
    ac.abort()
    await assert.rejects(queued, { name: 'AbortError', code: 'ABORT_ERR' })
    const s = p.stats()
    assert.equal(s.queued, 0)
    assert.equal(s.cancelled, 1)
    assert.equal(await running, 100)
    assert.equal(p.stats().completed, 1) // the cancelled task never ran
  })

  it('an aborted running task terminates its thread, which is replaced', async () => {
    const p = pool({ threads: 1 })
    const ac = new AbortController()
    const running = p.exec(ops('spinForever'), [], { signal: ac.signal })
    await until(p, (s) => s.busy === 1)
    ac.abort()
    await assert.rejects(running, { name: 'AbortError' })
    assert.equal(await p.run((a) => a, 'after'), 'after')
    assert.equal(p.stats().replaced, 1)
  })

  it('an already-aborted signal rejects at once', async () => {
    const p = pool({ threads: 1 })
    await assert.rejects(p.exec((a) => a, [1], { signal: AbortSignal.abort() }), { name: 'AbortError' })
  })
})

describe('close', () => {
  it('graceful close waits for running and queued tasks', async () => {
    const p = pool({ threads: 1 })
    const running = p.run(ops('sleep'), 150, 'first')
    const queued = p.run(ops('sleep'), 10, 'second')
    const closed = p.close({ timeoutMs: 5000 })
    await assert.rejects(p.run((a) => a, 1), errors.PoolClosedError)
    assert.deepEqual(await closed, { drained: true })
    assert.equal(await running, 'first')
    assert.equal(await queued, 'second')
    assert.equal(p.stats().threads, 0)
  })

  it('close({ timeoutMs }) rejects what is still running at the deadline', async () => {
    const p = pool({ threads: 1 })
    const running = p.run(ops('spinForever'))
    const rejected = assert.rejects(running, errors.PoolClosedError)
    await until(p, (s) => s.busy === 1)
    assert.deepEqual(await p.close({ timeoutMs: 100 }), { drained: false })
    await rejected
  })

  it('close({ timeoutMs }) past what a timer can wait (2^31-1 ms) still waits for running tasks', async () => {
    const p = pool({ threads: 1 })
    const running = p.run(ops('sleep'), 300, 'done')
    await until(p, (s) => s.busy === 1)
    assert.deepEqual(await p.close({ timeoutMs: 3e9 }), { drained: true })
    assert.equal(await running, 'done')
  })
})

describe('registry', () => {
  it('tracks live pools: queueDepth, busyThreads, closeAll', async () => {
    const p = createPool({ threads: 1 })
    const running = p.run(ops('sleep'), 100)
    const queued = p.run(ops('sleep'), 10)
    await until(p, (s) => s.busy === 1)
    assert.ok(registry.queueDepth() >= 1)
    assert.ok(registry.busyThreads() >= 1)
    await registry.closeAll({ timeoutMs: 5000 })
    assert.deepEqual(await Promise.all([running, queued]), [100, 10])
    assert.equal(registry.queueDepth(), 0)
    assert.equal(registry.busyThreads(), 0)
  })
})

describe('options', () => {
  it('bad options throw naming the option and the accepted values', () => {
    assert.throws(() => createPool({ threads: -1 }), { code: 'ERR_CLUSTERIZE_OFFLOAD_OPTION', message: 'offload: option "threads" must be a positive integer, got -1' })
    assert.throws(() => createPool({ threads: 1.5 }), /"threads" must be a positive integer, got 1.5/)
    assert.throws(() => createPool({ maxQueue: -2 }), /"maxQueue" must be an integer >= 0 or Infinity, got -2/)
    assert.throws(() => createPool({ taskTimeoutMs: 'soon' }), /"taskTimeoutMs" must be an integer from 0 to 2147483647, got "soon"/)
    assert.throws(() => createPool({ resourceLimits: { maxOldGenerationSizeMb: 0 } }), /"resourceLimits.maxOldGenerationSizeMb" must be a positive number/)
    assert.throws(() => createPool({ resourceLimits: { heap: 1 } }), /"resourceLimits" must be an object with any of/)
    assert.throws(() => createPool({ setup: './relative.js' }), /"setup" must be an absolute module path/)
    assert.throws(() => createPool({ treads: 2 }), /unknown option "treads"/)
    assert.throws(() => offload.task('./relative.js'), /absolute path/)
    assert.throws(() => offload.task(path.join(tasks, 'missing.js')), /cannot find module/)
  })

  it('default size is cluster-aware', () => {
    const cores = require('../lib/cpus').availableCpus()
    const saved = process.env.CLUSTERIZE_WORKERS
    try {
      delete process.env.CLUSTERIZE_WORKERS
      assert.equal(defaultThreads(), cores)
      process.env.CLUSTERIZE_WORKERS = String(cores * 2)
      assert.equal(defaultThreads(), 1)
      process.env.CLUSTERIZE_WORKERS = '2'
      assert.equal(defaultThreads(), Math.max(1, Math.floor(cores / 2)))
    } finally {
      if (saved === undefined) delete process.env.CLUSTERIZE_WORKERS
      else process.env.CLUSTERIZE_WORKERS = saved
    }
  })

  it('default size follows the CPUs the process may use (cgroup quota), not the host cores', () => {
    const cpus = require('../lib/cpus')
    const real = cpus.availableCpus
    const saved = process.env.CLUSTERIZE_WORKERS
    try {
      delete process.env.CLUSTERIZE_WORKERS
      cpus.availableCpus = () => 3 // e.g. cpu.max "300000 100000" on a bigger host
      assert.equal(defaultThreads(), 3)
      assert.equal(createPoolOptionsThreads(), 3)
      process.env.CLUSTERIZE_WORKERS = '2'
      assert.equal(defaultThreads(), 1)
    } finally {
      cpus.availableCpus = real
      if (saved === undefined) delete process.env.CLUSTERIZE_WORKERS
      else process.env.CLUSTERIZE_WORKERS = saved
    }
  })

  it('resourceLimits pass through to the threads', async () => {
    const p = pool({ threads: 1, resourceLimits: { maxOldGenerationSizeMb: 64 } })
    const limits = await p.run(() => require('node:worker_threads').resourceLimits)
    assert.equal(limits.maxOldGenerationSizeMb, 64)
  })
})

describe('thread priority', () => {
  const ownPriority = () => {
    const fs = require('node:fs')
    const os = require('node:os')
    const tid = Number(fs.readlinkSync('/proc/thread-self').split('/').pop())
    return os.getPriority(tid)
  }

  it('threads run niceness 10 below the event loop by default (Linux), and at its priority with niceness: 0', { skip: process.platform !== 'linux' && 'per-thread priorities are Linux-only' }, async () => {
    const base = require('node:os').getPriority(process.pid)
    assert.equal(await pool({ threads: 1 }).run(ownPriority), Math.min(19, base + 10))
    assert.equal(await pool({ threads: 1, niceness: 0 }).run(ownPriority), base)
    assert.equal(await pool({ threads: 1, niceness: 3 }).run(ownPriority), Math.min(19, base + 3))
  })

  it('rejects a bad niceness naming the option', () => {
    assert.throws(() => createPool({ niceness: 20 }), /option "niceness" must be an integer from 0 \(off\) to 19, got 20/)
  })
})
