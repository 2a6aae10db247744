'use strict'

/**
 * The supervisor, the reloader and the dispatcher on their own, with this
 * test process as the primary and real forked workers that speak the
 * protocol (test/fixtures/protocol-worker.js) but run no app.
 */

const { test, afterEach } = require('node:test')
const assert = require('node:assert')
const cluster = require('cluster')
const http = require('http')
const path = require('path')
const { createSupervisor } = require('./helpers/supervisor')
const { waitReady, survives } = require('../lib/primary/readiness')
const { createReloader, holdPredecessors } = require('../lib/primary/reload')
const { createDispatcher } = require('../lib/primary/dispatcher')
const { eventually } = require('./helpers/wait')

cluster.setupPrimary({ exec: path.join(__dirname, 'fixtures/protocol-worker.js') })

let current = null

afterEach(async () => {
  if (!current) return
  const supervisor = current
  current = null
  supervisor.stop()
  await Promise.all(supervisor.liveRecords().map((record) => supervisor.kill(record, 'shutdown')))
  for (const key of Object.keys(process.env)) if (key.startsWith('CZ_BEHAVIOUR')) delete process.env[key]
})

function startSupervisor (options) {
  const started = createSupervisor(options, (env) => cluster.fork(env))
  current = started.supervisor
  return started
}

const allReady = (supervisor, n) => eventually(() => supervisor.readyRecords().length === n && supervisor.readyRecords().every((r) => r.heartbeatAt > 0))

test('a crashed worker comes back in the same slot, counted as a restart, labelled with the code on disk', async () => {
  const { supervisor } = startSupervisor({ workers: 2, restart: { backoffInitialMs: 10 } })
  supervisor.start()
  await allReady(supervisor, 2)
  const victim = supervisor.slots[1]
  supervisor.codeGeneration = 3 // as after two rolled-back reloads
  process.kill(victim.pid, 'SIGKILL')
  await eventually(() => supervisor.slots[1] && supervisor.slots[1] !== victim && supervisor.slots[1].isReady())
  const replacement = supervisor.slots[1]
  assert.strictEqual(replacement.id, 1)
  assert.strictEqual(replacement.restarts, 1)
  assert.strictEqual(replacement.generation, 3)
  assert.strictEqual(supervisor.crashLooping, false)
})

test('the breaker counts per generation and fires once', async () => {
  const { supervisor, log } = startSupervisor({ workers: 1, restart: { backoffInitialMs: 10, backoffMaxMs: 20, maxCrashes: 2 } })
  supervisor.start()
  await allReady(supervisor, 1)
  const loops = []
  supervisor.on('crashloop', (info) => loops.push(info))
  process.env.CZ_BEHAVIOUR_2 = 'boot-fail'
  for (let i = 0; i < 3; i++) {
    const canary = supervisor.spawn(0, 2)
    await assert.rejects(waitReady(supervisor, canary, 5000), /boot-fail in generation 2/)
  }
  assert.strictEqual(loops.length, 1, 'three failures, one event')
  assert.strictEqual(loops[0].generation, 2)
  assert.ok(supervisor.slots[0].isReady(), 'the generation-1 worker still serves')
  assert.strictEqual(log.lines.filter((l) => /crash loop/.test(l)).length, 1)
})

test('a held predecessor serves again when its successor fails; nothing is respawned', async () => {
  const { supervisor, log } = startSupervisor({ workers: 1, restart: { backoffInitialMs: 10 } })
  const holds = holdPredecessors(supervisor, log)
  supervisor.start()
  await allReady(supervisor, 1)
  const predecessor = supervisor.slots[0]
  process.env.CZ_BEHAVIOUR_2 = 'crash-after:300'
  const successor = supervisor.spawn(0, 2)
  await waitReady(supervisor, successor, 5000)
  holds.promote(successor, true)
  assert.strictEqual(supervisor.slots[0], successor)
  const failure = await survives(supervisor, successor, 10000)
  assert.match(failure, /worker 0 \(generation 2\) exited with code 1 \d+ ms after it was ready/)
  assert.strictEqual(supervisor.slots[0], predecessor)
  assert.strictEqual(supervisor.respawnTimers.size, 0)
  assert.strictEqual(supervisor.liveRecords().length, 1)
})

test('an app that cannot load at first start: one boot-fatal, no retry', async () => {
  process.env.CZ_BEHAVIOUR = 'app-invalid'
  const { supervisor } = startSupervisor({ workers: 2, restart: { backoffInitialMs: 10 } })
  const fatal = []
  supervisor.on('boot-fatal', (message) => fatal.push(message))
  supervisor.start()
  await eventually(() => supervisor.liveRecords().length === 0)
  assert.deepStrictEqual(fatal, ['app-invalid in generation 1'])
  assert.strictEqual(supervisor.respawnTimers.size, 0)
  assert.ok(supervisor.isEmpty())
})

test('reloader: a canary that dies while baking is rolled back; a good one replaces every slot', async () => {
  const { supervisor, config, log } = startSupervisor({ workers: 2, reload: { bakeMs: 1500 }, restart: { backoffInitialMs: 10 } })
  const reloader = createReloader(config, supervisor, log)
  supervisor.start()
  await allReady(supervisor, 2)
  const before = supervisor.slots.map((r) => r.pid)
  process.env.CZ_BEHAVIOUR_2 = 'crash-after:200'
  const failed = await reloader.reload()
  assert.strictEqual(failed.ok, false)
  assert.strictEqual(failed.rolledBack, true)
  assert.strictEqual(failed.replaced, 0)
  assert.deepStrictEqual(supervisor.slots.map((r) => r.pid), before)

  const good = await reloader.reload()
  assert.strictEqual(good.ok, true, JSON.stringify(good))
  assert.strictEqual(good.generation, 3)
  assert.strictEqual(good.replaced, 2)
  assert.deepStrictEqual(supervisor.slots.map((r) => r.generation), [3, 3])
  assert.ok(supervisor.slots.every((r) => !before.includes(r.pid)))
})

test('dispatcher: hands bare connections round robin, counts them, refuses once closed', async () => {
  const { supervisor } = startSupervisor({ workers: 2 })
  const dispatcher = createDispatcher({ mode: 'rr', port: 0, host: '127.0.0.1' }, supervisor, { isOverloaded: () => false })
  const { port } = await dispatcher.listen()
  supervisor.start()
  await allReady(supervisor, 2)
  const pids = new Set()
  for (let i = 0; i < 6; i++) pids.add((await get(port)).pid)
  assert.strictEqual(pids.size, 2)
  const handed = supervisor.readyRecords().map((r) => dispatcher.connectionsHanded(r))
  assert.strictEqual(handed[0] + handed[1], 6)
  await dispatcher.close()
  await assert.rejects(get(port), (err) => err.code === 'ECONNREFUSED')
})

function get (port) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
      let body = ''
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve(JSON.parse(body)))
    }).on('error', reject)
  })
}
