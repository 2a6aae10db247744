'use strict'

// Dynamic workers' decision as a pure unit: event-loop utilization samples in, decisions out.

const { test } = require('node:test')
const assert = require('node:assert')
const { createScalePolicy } = require('../lib/primary/scale-policy')
const { resolveConfig } = require('../lib/config')

const OPTIONS = { min: 1, upElu: 0.75, downElu: 0.25, upAfterMs: 10000, downAfterMs: 60000 }

/** Feed samples one second apart; return every decision that is not a hold, with its time. */
function run (policy, samples, start) {
  const changes = []
  let count = start.count
  samples.forEach((sample, i) => {
    const now = (start.at || 0) + i * 1000
    const decision = policy.decide(Object.assign({ now, count, cap: 4, memoryRoom: true }, sample))
    if (decision.action !== 'hold') {
      changes.push({ at: now, action: decision.action, target: decision.target })
      count = decision.target
    }
  })
  return { changes, count }
}

const repeat = (n, sample) => Array.from({ length: n }, () => sample)

test('high utilization for upAfterMs adds one worker; the next one needs a full window again', () => {
  const policy = createScalePolicy(OPTIONS)
  const { changes, count } = run(policy, repeat(25, { elu: [0.9, 0.95] }), { count: 2 })
  assert.deepStrictEqual(changes, [
    { at: 10000, action: 'up', target: 3 },
    { at: 21000, action: 'up', target: 4 }
  ])
  assert.strictEqual(count, 4)
})

test('a dip below upElu restarts the window (hysteresis): bursts shorter than upAfterMs add nothing', () => {
  const policy = createScalePolicy(OPTIONS)
  const bursty = []
  for (let i = 0; i < 5; i++) bursty.push(...repeat(8, { elu: [0.9] }), { elu: [0.5] })
  assert.deepStrictEqual(run(policy, bursty, { count: 1 }).changes, [])
})

test('between the thresholds nothing changes; low utilization for downAfterMs retires one, never below min', () => {
  const policy = createScalePolicy(Object.assign({}, OPTIONS, { min: 2 }))
  assert.deepStrictEqual(run(policy, repeat(120, { elu: [0.5, 0.5, 0.5] }), { count: 3 }).changes, [])
  const { changes, count } = run(policy, repeat(200, { elu: [0.05, 0.1, 0.02] }), { count: 3, at: 200000 })
  assert.deepStrictEqual(changes, [{ at: 260000, action: 'down', target: 2 }])
  assert.strictEqual(count, 2)
})

test('at the cap (workers.max or the CPU quota), or without memory room for one more worker, it holds and says why', () => {
  const policy = createScalePolicy(OPTIONS)
  let decision
  for (let now = 0; now <= 12000; now += 1000) decision = policy.decide({ now, count: 4, elu: [1, 1, 1, 1], cap: 4, memoryRoom: true })
  assert.strictEqual(decision.action, 'hold')
  assert.match(decision.reason, /already at the cap \(4\)/)
  for (let now = 13000; now <= 14000; now += 1000) decision = policy.decide({ now, count: 2, elu: [1, 1], cap: 4, memoryRoom: false })
  assert.strictEqual(decision.action, 'hold')
  assert.match(decision.reason, /memory has no room for one more worker/)
  // Room again: the high window already ran its course, so the worker comes at once.
  decision = policy.decide({ now: 15000, count: 2, elu: [1, 1], cap: 4, memoryRoom: true })
  assert.deepStrictEqual([decision.action, decision.target], ['up', 3])
})

test('a cap that shrinks (the CPU quota) brings the count down at once; a count below min is raised at once', () => {
  const policy = createScalePolicy(Object.assign({}, OPTIONS, { min: 2 }))
  const down = policy.decide({ now: 0, count: 6, elu: [0.9], cap: 3 })
  assert.deepStrictEqual([down.action, down.target, down.cause], ['down', 3, 'cap'])
  // min wins over a cap below it.
  const floor = policy.decide({ now: 0, count: 2, elu: [0.9], cap: 1 })
  assert.strictEqual(floor.action, 'hold')
  const up = policy.decide({ now: 0, count: 1, elu: [], cap: 4 })
  assert.deepStrictEqual([up.action, up.target, up.cause], ['up', 2, 'min'])
})

test('no heartbeat yet, no judgement; a change restarts both windows', () => {
  const policy = createScalePolicy(OPTIONS)
  assert.strictEqual(policy.decide({ now: 0, count: 1, elu: [], cap: 4 }).action, 'hold')
  for (let now = 0; now < 9000; now += 1000) policy.decide({ now, count: 1, elu: [0.9], cap: 4 })
  policy.restartWindows()
  assert.strictEqual(policy.decide({ now: 10000, count: 1, elu: [0.9], cap: 4 }).action, 'hold')
  assert.strictEqual(policy.decide({ now: 20000, count: 1, elu: [0.9], cap: 4 }).action, 'up')
})

test('workers: { min, max } is validated at startup, naming the option', () => {
  const config = resolveConfig({ workers: { min: 2, max: 6 } }, {})
  assert.strictEqual(config.workers, 2)
  assert.deepStrictEqual(config.dynamicWorkers, { min: 2, max: 6, upElu: 0.75, downElu: 0.25, upAfterMs: 10000, downAfterMs: 60000 })
  assert.strictEqual(resolveConfig({ workers: 'auto' }, {}).workersAuto, true)
  assert.strictEqual(resolveConfig({ workers: 3 }, {}).dynamicWorkers, null)
  assert.throws(() => resolveConfig({ workers: { min: 4, max: 2 } }, {}), /option "workers.max" must be an integer from 4 to 1024, got 2/)
  assert.throws(() => resolveConfig({ workers: { min: 0 } }, {}), /option "workers.min" must be an integer from 1 to 1024, got 0/)
  assert.throws(() => resolveConfig({ workers: { upElu: 0.3, downElu: 0.4 } }, {}), /option "workers.downElu" must be below workers.upElu \(0.3\), got 0.4/)
  assert.throws(() => resolveConfig({ workers: { maximum: 3 } }, {}), /unknown option "workers.maximum" \(accepted: min, max, upElu, downElu, upAfterMs, downAfterMs\)/)
  assert.throws(() => resolveConfig({ workers: [2] }, {}), /option "workers" must be an integer from 0 to 1024, 'auto', or \{ min, max \}/)
})
