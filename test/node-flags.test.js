'use strict'

/**
 * The node flags workers run with: the primary's (command line and
 * NODE_OPTIONS, as node:cluster gives them), plus --max-semi-space-size from
 * the option maxSemiSpaceMB (default 16) unless the app sets its own
 * (lib/primary/worker-flags.js; docs/operations.md, "Garbage collection
 * pauses"). A semi-space of 2 MB is below V8's default on any Node in the
 * engines range, so the heap limit it gives (old generation plus three
 * semi-spaces) tells whether a worker really runs with it.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawnSync } = require('child_process')
const { startCluster, stopAll } = require('./helpers/cluster')
const { workerExecArgv } = require('../lib/primary/worker-flags')
const { oldGenerationLimit } = require('../lib/worker/heap-limit')
const { nodeFlags, flagMB } = require('../lib/node-flags')
const { resolveConfig } = require('../lib/config')
const { ClusterizeOptionError } = require('../lib/errors')

after(stopAll)

const MB = 1024 * 1024
const FIXTURE = 'test/fixtures/app-cluster.js'
const FLAG = '--max-semi-space-size=2'
const OLD_SPACE = '--max-old-space-size=256'

/** heap_size_limit of a plain node process with these flags. */
function heapLimitWith (flags) {
  const result = spawnSync(process.execPath, flags.concat(['-p', "require('v8').getHeapStatistics().heap_size_limit"]), { encoding: 'utf8' })
  assert.strictEqual(result.status, 0, result.stderr)
  return Number(result.stdout.trim())
}

/** What /node-flags answers from `count` different workers. */
async function workerFlags (cluster, count) {
  const seen = new Map()
  for (let i = 0; i < 20 && seen.size < count; i++) {
    const res = await cluster.get('/node-flags')
    assert.strictEqual(res.status, 200)
    seen.set(res.json.pid, res.json)
  }
  assert.strictEqual(seen.size, count, 'every worker answered')
  return Array.from(seen.values())
}

function semiSpaceFlags (flags) {
  return flags.execArgv.filter((flag) => flag.startsWith('--max-semi-space-size'))
}

const withFlag = heapLimitWith([OLD_SPACE, FLAG])
const withBound = heapLimitWith([OLD_SPACE, '--max-semi-space-size=16'])
const withDefault = heapLimitWith([OLD_SPACE])

test('a 2 MB semi-space changes the heap limit on this Node (so the checks below can tell)', () => {
  assert.ok(withFlag < withBound && withFlag < withDefault, `heap limit ${withFlag} with ${FLAG}, ${withBound} with 16 MB, ${withDefault} with V8's default`)
})

test('maxSemiSpaceMB: an integer from 0 to 1024, default 16; anything else fails at startup naming it', () => {
  assert.strictEqual(resolveConfig({}, {}).maxSemiSpaceMB, 16)
  assert.strictEqual(resolveConfig({ maxSemiSpaceMB: 0 }, {}).maxSemiSpaceMB, 0)
  for (const bad of [-1, 1.5, '16', 2048, null]) {
    assert.throws(() => resolveConfig({ maxSemiSpaceMB: bad }, {}),
      (err) => err instanceof ClusterizeOptionError && err.option === 'maxSemiSpaceMB' && /from 0 to 1024/.test(err.message), String(bad))
  }
})

test('workerExecArgv: adds the bound unless the flags or NODE_OPTIONS set one, or the option is 0', () => {
  assert.deepStrictEqual(workerExecArgv(['--inspect=0'], '', 16), ['--inspect=0', '--max-semi-space-size=16'])
  assert.deepStrictEqual(workerExecArgv(['--max-semi-space-size=64'], '', 16), ['--max-semi-space-size=64'])
  assert.deepStrictEqual(workerExecArgv(['--max_semi_space_size=64'], '', 16), ['--max_semi_space_size=64'])
  assert.deepStrictEqual(workerExecArgv([], '--enable-source-maps --max-semi-space-size=8', 16), [])
  assert.deepStrictEqual(workerExecArgv(['--trace-gc'], undefined, 0), ['--trace-gc'])
})

test('the heap guard\'s old-generation limit is exact on this Node, with V8\'s default semi-space and with a flag', () => {
  // Without a semi-space flag the reserve is this Node's default, capped at a quarter of the limit
  // (V8 shrinks the young generation of small heaps it sizes itself): 1 GB leaves it uncapped.
  assert.strictEqual(oldGenerationLimit(heapLimitWith(['--max-old-space-size=1024']), []), 1024 * MB)
  assert.strictEqual(oldGenerationLimit(withBound, ['--max-semi-space-size=16']), 256 * MB)
  assert.strictEqual(oldGenerationLimit(withFlag, [FLAG]), 256 * MB)
})

test('nodeFlags: NODE_OPTIONS first, the command line after, so the last value of a flag is the one node runs with', () => {
  const flags = nodeFlags(['--max-old-space-size=100'], ' --max-old-space-size=200  --trace-gc ')
  assert.deepStrictEqual(flags, ['--max-old-space-size=200', '--trace-gc', '--max-old-space-size=100'])
  assert.strictEqual(flagMB(flags, 'max-old-space-size'), 100)
  assert.strictEqual(flagMB(['--max_old_space_size=300'], 'max-old-space-size'), 300)
  assert.strictEqual(flagMB(['--max-old-space-size'], 'max-old-space-size'), 0)
  assert.strictEqual(flagMB([], 'max-old-space-size'), 0)
})

test('the heap guard reads the size node runs with when NODE_OPTIONS and the command line both give one', () => {
  const script = "const v8 = require('v8'); const { oldGenerationLimit } = require(" + JSON.stringify(require.resolve('../lib/worker/heap-limit')) + ');' +
    'console.log(JSON.stringify({ limit: v8.getHeapStatistics().heap_size_limit, old: oldGenerationLimit(v8.getHeapStatistics().heap_size_limit) }))'
  const result = spawnSync(process.execPath, ['--max-old-space-size=100', FLAG, '-e', script], {
    encoding: 'utf8',
    env: Object.assign({}, process.env, { NODE_OPTIONS: '--max-old-space-size=200' })
  })
  assert.strictEqual(result.status, 0, result.stderr)
  const seen = JSON.parse(result.stdout)
  assert.strictEqual(seen.limit, heapLimitWith(['--max-old-space-size=100', FLAG]), 'node runs with the command line\'s size')
  assert.strictEqual(seen.old, 100 * MB)
})

test('by default every worker runs with --max-semi-space-size=16 beside the primary\'s own flags', async () => {
  const cluster = await startCluster(FIXTURE, { execArgv: [OLD_SPACE], env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2 }) } })
  try {
    for (const flags of await workerFlags(cluster, 2)) {
      assert.deepStrictEqual(semiSpaceFlags(flags), ['--max-semi-space-size=16'])
      assert.ok(flags.execArgv.includes(OLD_SPACE), flags.execArgv.join(' '))
      assert.strictEqual(flags.heapSizeLimit, withBound)
    }
  } finally {
    await cluster.stop()
  }
})

test('maxSemiSpaceMB: 0 leaves V8\'s default', async () => {
  const cluster = await startCluster(FIXTURE, { execArgv: [OLD_SPACE], env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 1, maxSemiSpaceMB: 0 }) } })
  try {
    const [flags] = await workerFlags(cluster, 1)
    assert.deepStrictEqual(semiSpaceFlags(flags), [])
    assert.strictEqual(flags.heapSizeLimit, withDefault)
  } finally {
    await cluster.stop()
  }
})

test('a semi-space flag on the primary\'s command line reaches every worker, in place of the option\'s', async () => {
  const cluster = await startCluster(FIXTURE, { execArgv: [OLD_SPACE, FLAG], env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2 }) } })
  try {
    for (const flags of await workerFlags(cluster, 2)) {
      assert.deepStrictEqual(semiSpaceFlags(flags), [FLAG])
      assert.strictEqual(flags.heapSizeLimit, withFlag)
    }
  } finally {
    await cluster.stop()
  }
})

test('a semi-space flag in NODE_OPTIONS reaches the workers, in place of the option\'s', async () => {
  const cluster = await startCluster(FIXTURE, { env: { NODE_OPTIONS: `${OLD_SPACE} ${FLAG}`, CZ_TEST_OPTIONS: JSON.stringify({ workers: 1 }) } })
  try {
    const [flags] = await workerFlags(cluster, 1)
    assert.match(flags.nodeOptions, /--max-semi-space-size=2/)
    assert.deepStrictEqual(semiSpaceFlags(flags), [])
    assert.strictEqual(flags.heapSizeLimit, withFlag)
  } finally {
    await cluster.stop()
  }
})
