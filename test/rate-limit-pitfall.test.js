'use strict'

/**
 * express-rate-limit's default MemoryStore under several workers: the one
 * warning that names the fix, and defaultRateLimitStore 'cluster' making
 * that default store count in the cluster, for the CommonJS and the ESM
 * build of express-rate-limit, v8 and v7 (test/helpers/rate-limit-versions.js:
 * the app folder resolves `express-rate-limit` to that major). In this
 * process, with the real express-rate-limit; the limiters share one
 * rate-limit service as two workers share their primary's.
 */

const { describe, it, afterEach, after } = require('node:test')
const assert = require('node:assert/strict')
const { watchRateLimitStores, unwatchRateLimitStores, rateLimitCopies } = require('../lib/worker/rate-limit-pitfall')
const { createRateLimitService } = require('../lib/state/rate-limit-service')
const { clientOf, LOCAL_CALLER } = require('../lib/state/client')
const { ClusterStore } = require('../rate-limit')
const { VERSIONS, appDirFor, removeAppDirs } = require('./helpers/rate-limit-versions')
const { serveLimited: serve, statuses } = require('./helpers/rate-limit')

after(removeAppDirs)

for (const version of VERSIONS) {
  const { rateLimit } = require(version.module)

  describe(`express-rate-limit ${version.label} MemoryStore pitfall`, () => {
    const APP_DIR = appDirFor(version)

    afterEach(() => unwatchRateLimitStores())

    it('several workers: one warning naming ClusterStore and --rate-limit cluster, however many limiters', async () => {
      const warnings = []
      const watched = await watchRateLimitStores({ warn: (m) => warnings.push(m), info () {} }, 2, APP_DIR)
      assert.equal(watched, 2, 'the CommonJS and the ESM build are both watched')
      const copies = await rateLimitCopies(APP_DIR)
      assert.equal(copies[0].MemoryStore, require(version.module).MemoryStore, `the watched CommonJS build is express-rate-limit ${version.label}`)
      assert.equal(copies[1].MemoryStore, (await import(version.module)).MemoryStore, `the watched ESM build is express-rate-limit ${version.label}`)
      rateLimit({ windowMs: 1000, limit: 5 })
      rateLimit({ windowMs: 1000, limit: 5 })
      assert.equal(warnings.length, 1)
      assert.match(warnings[0], /ClusterStore/)
      assert.match(warnings[0], /--rate-limit cluster/)
    })

    it('the ESM build of express-rate-limit is watched too', async () => {
      const warnings = []
      await watchRateLimitStores({ warn: (m) => warnings.push(m), info () {} }, 2, APP_DIR)
      const esm = await import(version.module)
      esm.rateLimit({ windowMs: 1000, limit: 5 })
      assert.equal(warnings.length, 1)
    })

    it('one worker: no warning', async () => {
      const warnings = []
      await watchRateLimitStores({ warn: (m) => warnings.push(m), info () {} }, 1, APP_DIR)
      rateLimit({ windowMs: 1000, limit: 5 })
      assert.equal(warnings.length, 0)
    })

    it("defaultRateLimitStore 'cluster': rateLimit() with no store counts in the cluster: exactly the limit across two workers' limiters", async () => {
      const service = createRateLimitService()
      const client = clientOf('rate-limit', { requests: service.handlers }, LOCAL_CALLER)
      // Each "worker" builds its limiters in the same order: the n-th store of each shares a prefix.
      let built = 0
      const createStore = () => new ClusterStore({ prefix: `rl:${(built++ % 1) + 1}:`, client })
      const warnings = []
      await watchRateLimitStores({ warn: (m) => warnings.push(m), info () {} }, 2, APP_DIR, { useCluster: true, createStore })
      const a = await serve(rateLimit({ windowMs: 60000, limit: 10 }))
      const b = await serve(rateLimit({ windowMs: 60000, limit: 10 }))
      try {
        const codes = [...await statuses(a.port, 8), ...await statuses(b.port, 8)]
        assert.equal(codes.filter((c) => c === 200).length, 10)
        assert.equal(codes.filter((c) => c === 429).length, 6)
      } finally {
        await a.close()
        await b.close()
      }
      assert.equal(warnings.length, 0, 'nothing to warn about: the counts are shared')
    })

    it('control: without the watch, the two default stores let twice the limit through', async () => {
      const a = await serve(rateLimit({ windowMs: 60000, limit: 10 }))
      const b = await serve(rateLimit({ windowMs: 60000, limit: 10 }))
      try {
        const codes = [...await statuses(a.port, 8), ...await statuses(b.port, 8)]
        assert.equal(codes.filter((c) => c === 200).length, 16)
      } finally {
        await a.close()
        await b.close()
      }
    })
  })
}
