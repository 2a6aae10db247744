'use strict'

/**
 * Express 4 is in the peer range (`^4.21.0 || ^5.0.0`); the rest of the suite
 * runs Express 5. A real 2-worker cluster on an Express 4 app: sessions shared
 * by both workers, offload (inline, offload.route, a task that throws through
 * offload.errorHandler) and the bus.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const { startCluster } = require('./helpers/cluster')

describe('an Express 4 app on 2 workers', () => {
  let cluster
  before(async () => {
    cluster = await startCluster(path.join(__dirname, 'fixtures', 'express4-cluster.js'))
  })
  after(async () => {
    if (cluster) await cluster.stop()
  })

  it('is served by Express 4', async () => {
    const res = await cluster.get('/version')
    assert.equal(res.status, 200)
    assert.match(res.json.express, /^4\./)
  })

  it('shares one session across both workers', async () => {
    const first = await cluster.get('/count')
    assert.equal(first.status, 200, first.body)
    const cookie = first.headers['set-cookie'][0].split(';')[0]
    const pids = new Set([first.json.pid])
    let visits = first.json.visits
    // Fresh connections until both workers served it (the kernel picks the worker with 'balanced').
    for (let i = 0; i < 60 && (i < 12 || pids.size < 2); i++) {
      const res = await cluster.get('/count', { headers: { cookie } })
      assert.equal(res.status, 200, res.body)
      assert.equal(res.json.visits, visits + 1)
      visits = res.json.visits
      pids.add(res.json.pid)
    }
    assert.equal(pids.size, 2, 'both workers served the session')
  })

  it('offloads work and answers a thread error as JSON', async () => {
    assert.deepEqual((await cluster.get('/square/12')).json, { result: 144 })
    assert.deepEqual((await cluster.get('/route/41')).json, 42)
    const failed = await cluster.get('/throws')
    assert.equal(failed.status, 500)
    assert.equal(failed.json.error, 'thrown in the thread')
  })

  it('reaches every worker over the bus', async () => {
    assert.deepEqual((await cluster.get('/workers')).json, [0, 1])
  })
})
