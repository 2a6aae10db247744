'use strict'

/**
 * express-rate-limit's default MemoryStore under several workers: the one
 * warning that names the fix, and defaultRateLimitStore 'cluster' making
 * that default store count in the cluster, for the CommonJS and the ESM
 * build of express-rate-limit. In this process, with the real
 * express-rate-limit; the limiters share one rate-limit service as two
 * workers share their primary's.
 */

const { describe, it, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const http = require('http')
const path = require('path')
const express = require('express')
const { rateLimit } = require('express-rate-limit')
const { watchRateLimitStores, unwatchRateLimitStores } = require('../lib/worker/rate-limit-pitfall')
const { createRateLimitService } = require('../lib/state/rate-limit-service')
const { clientOf, LOCAL_CALLER } = require('../lib/state/client')
const { ClusterStore } = require('../rate-limit')

const REPO = path.join(__dirname, '..')

async function serve (limiter) {
  const app = express()
  app.use(limiter)
  app.get('/', (req, res) => res.send('ok'))
  const server = http.createServer(app)
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { port: server.address().port, close: () => new Promise((resolve) => server.close(resolve)) }
}

async function statuses (port, n) {
  const out = []
  for (let i = 0; i < n; i++) {
    const res = await fetch(`http://127.0.0.1:${port}/`, { headers: { connection: 'close' } })
    await res.text()
    out.push(res.status)
  }
  return out
}

describe('express-rate-limit MemoryStore pitfall', () => {
  afterEach(() => unwatchRateLimitStores())

  it('several workers: one warning naming ClusterStore and --rate-limit cluster, however many limiters', async () => {
    const warnings = []
    const watched = await watchRateLimitStores({ warn: (m) => warnings.push(m), info () {} }, 2, REPO)
    assert.equal(watched, 2, 'the CommonJS and the ESM build are both watched')
    rateLimit({ windowMs: 1000, limit: 5 })
    rateLimit({ windowMs: 1000, limit: 5 })
    assert.equal(warnings.length, 1)
    assert.match(warnings[0], /ClusterStore/)
    assert.match(warnings[0], /--rate-limit cluster/)
  })

  it('the ESM build of express-rate-limit is watched too', async () => {
    const warnings = []
    await watchRateLimitStores({ warn: (m) => warnings.push(m), info () {} }, 2, REPO)
    const esm = await import('express-rate-limit')
    esm.rateLimit({ windowMs: 1000, limit: 5 })
    assert.equal(warnings.length, 1)
  })

  it('one worker: no warning', async () => {
    const warnings = []
    await watchRateLimitStores({ warn: (m) => warnings.push(m), info () {} }, 1, REPO)
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
    await watchRateLimitStores({ warn: (m) => warnings.push(m), info () {} }, 2, REPO, { useCluster: true, createStore })
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
