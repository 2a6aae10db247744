'use strict'

/**
 * The heap guard's decision from heartbeat figures: heap sizes and rates as
 * measured on Node 20 (bench/heap-guard.js). No cluster: the cluster cases
 * are in test/reload-failing-code.test.js.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { createHeapGuard } = require('../lib/primary/heap-guard')

const MB = 1024 * 1024
/** A 256 MB old generation: heap_size_limit is 304 MB with V8's 48 MB young-generation reserve. */
const SMALL = { heapLimit: 304 * MB, heapOldLimit: 256 * MB }

/** Feed heartbeats (heapUsed in MB, one a second) and return the first verdict and its beat. */
function firstVerdict (heap, usedMB, options) {
  const judge = createHeapGuard(Object.assign({ maxHeapRatio: 0.9, heartbeatMs: 1000 }, options))
  const record = {}
  for (let i = 0; i < usedMB.length; i++) {
    const verdict = judge(record, Object.assign({ heapUsed: usedMB[i] * MB }, heap), 1000 * (i + 1))
    if (verdict) return { beat: i, verdict }
  }
  return null
}

test('a 256 MB heap: 0.9 of the old generation fires where 0.9 of heap_size_limit never could', () => {
  // V8 aborts at about 253 MB used here: 0.83 of heap_size_limit.
  const found = firstVerdict(SMALL, [100, 100, 235, 235])
  assert.ok(found, 'the guard fired')
  assert.strictEqual(found.beat, 2)
  assert.match(found.verdict, /^heap at 92% of its limit \(256 MB; max 90%\)/)
  // No growth needed: the first beat over the ratio fires. Against heap_size_limit (the old
  // comparison) 235 MB is 0.77, and the abort comes at 0.83.
  assert.strictEqual(firstVerdict(SMALL, [235]).beat, 0)
  assert.ok(235 / 304 < 0.9 && 253 / 304 < 0.9)
})

test('a fast leak (70 MB/s) on 256 MB is caught by its growth, a beat before the ratio would be', () => {
  // One beat a second: 10, 80, 150, 220 MB, and V8 aborts before the next (290).
  const found = firstVerdict(SMALL, [10, 80, 150, 220])
  assert.ok(found)
  assert.strictEqual(found.beat, 2, 'at 150 MB (59%), two intervals of growth seen')
  assert.match(found.verdict, /^heap grows 70 MB\/s, at 59% of its limit \(256 MB\): it would pass 90% within 3000 ms/)
})

test('growth in one interval only (garbage between two collections), or a heap under half full, does not recycle', () => {
  assert.strictEqual(firstVerdict(SMALL, [60, 190, 70, 200, 80, 195]), null, 'a sawtooth')
  assert.strictEqual(firstVerdict(SMALL, [20, 50, 80, 110, 120, 121]), null, 'growing, but under half full and then flat')
  // A 4 GB default heap growing 30 MB/s at 1 GB: far from the limit.
  assert.strictEqual(firstVerdict({ heapLimit: 4144 * MB, heapOldLimit: 4096 * MB }, [900, 930, 960, 990]), null)
})

test('off with maxHeapRatio 0; a worker without heapOldLimit (older heartbeat) is judged against heapLimit', () => {
  assert.strictEqual(firstVerdict(SMALL, [10, 100, 200, 250], { maxHeapRatio: 0 }), null)
  const found = firstVerdict({ heapLimit: 256 * MB }, [240])
  assert.match(found.verdict, /heap at 94% of its limit/)
})
