'use strict'

/**
 * Node flags reach the workers: docs/operations.md ("Garbage collection
 * pauses on Node 24") tells users to set V8's young generation with
 * `node --max-semi-space-size=N app.js` or NODE_OPTIONS, which only works if
 * every worker clusterize forks runs with the primary's flags. A semi-space
 * of 2 MB is below V8's default on any Node in the engines range, so the
 * heap limit it gives (old generation plus three semi-spaces) tells whether
 * the worker really runs with it.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawnSync } = require('child_process')
const { startCluster, stopAll } = require('./helpers/cluster')

after(stopAll)

const FLAG = '--max-semi-space-size=2'
const OLD_SPACE = '--max-old-space-size=256'

/** heap_size_limit of a plain node process with these flags. */
function heapLimitWith (flags) {
  const result = spawnSync(process.execPath, flags.concat(['-p', "require('v8').getHeapStatistics().heap_size_limit"]), { encoding: 'utf8' })
  assert.strictEqual(result.status, 0, result.stderr)
  return Number(result.stdout.trim())
}

const withFlag = heapLimitWith([OLD_SPACE, FLAG])
const without = heapLimitWith([OLD_SPACE])

test('the flag changes the heap limit on this Node (so the checks below can tell)', () => {
  assert.ok(withFlag < without, `heap limit ${withFlag} with ${FLAG}, ${without} without`)
})

test('a flag on the primary\'s command line reaches every worker', async () => {
  const cluster = await startCluster('test/fixtures/app-cluster.js', {
    execArgv: [OLD_SPACE, FLAG],
    env: { CZ_TEST_OPTIONS: JSON.stringify({ workers: 2 }) }
  })
  try {
    const seen = new Map()
    for (let i = 0; i < 20 && seen.size < 2; i++) {
      const res = await cluster.get('/node-flags')
      assert.strictEqual(res.status, 200)
      seen.set(res.json.pid, res.json)
    }
    assert.strictEqual(seen.size, 2, 'both workers answered')
    for (const flags of seen.values()) {
      assert.ok(flags.execArgv.includes(FLAG), `worker flags: ${flags.execArgv.join(' ')}`)
      assert.strictEqual(flags.heapSizeLimit, withFlag)
    }
  } finally {
    await cluster.stop()
  }
})

test('a flag in NODE_OPTIONS reaches the workers', async () => {
  const cluster = await startCluster('test/fixtures/app-cluster.js', {
    env: { NODE_OPTIONS: `${OLD_SPACE} ${FLAG}`, CZ_TEST_OPTIONS: JSON.stringify({ workers: 1 }) }
  })
  try {
    const res = await cluster.get('/node-flags')
    assert.strictEqual(res.status, 200)
    assert.match(res.json.nodeOptions, /--max-semi-space-size=2/)
    assert.strictEqual(res.json.heapSizeLimit, withFlag)
  } finally {
    await cluster.stop()
  }
})
