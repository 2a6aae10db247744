'use strict'

const { describe, it, after } = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const path = require('node:path')
const express = require('express')
const request = require('supertest')
const offload = require('../middleware/offload')
const registry = require('../lib/pool/registry')
const { untilStats: until } = require('./helpers/wait')

const tasks = path.join(__dirname, 'fixtures', 'tasks')
const ops = (name) => offload.task(path.join(tasks, 'ops.js'), name)

const middlewares = []
const servers = []
function mw (options) {
  const m = offload(options)
  middlewares.push(m)
  return m
}
function listen (app) {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server))
    servers.push(server)
  })
}
after(async () => {
  for (const server of servers) {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
  await Promise.all(middlewares.map((m) => m.close({ timeoutMs: 1000 })))
  await registry.closeAll({ timeoutMs: 1000 }) // the default pool of offload.route()
})

/** GET on a raw socket; returns { done, destroy } so a test can walk away mid-request. */
function rawGet (server, urlPath) {
  const { port } = server.address()
  const req = http.get({ host: '127.0.0.1', port, path: urlPath, agent: false })
  const done = new Promise((resolve) => {
    req.on('response', (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { body += c })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', (err) => resolve({ error: err.code }))
  })
  return { done, destroy: () => req.destroy() }
}

describe('req.offload', () => {
  const m = mw({ threads: 2 })
  const app = express()
  app.use(express.json())
  app.use(m)
  app.get('/mul', async (req, res) => {
    res.json({ result: await req.offload((a, b) => a * b, Number(req.query.a), Number(req.query.b)) })
  })
  app.get('/async', async (req, res) => {
    res.json({ result: await req.offload(async (n) => { await new Promise((resolve) => setTimeout(resolve, 5)); return n + 1 }, 41) })
  })
  app.get('/module', async (req, res) => {
    res.json({ result: await req.offload(ops(), 40, 2) })
  })
  app.get('/fail', async (req) => {
    await req.offload(ops('fail'), 'task went wrong')
  })
  app.get('/closure', async (req, res) => {
    const factor = 3
    res.json(await req.offload((n) => n * factor, 2))
  })
  app.post('/route', offload.route((body) => ({ sum: body.a + body.b }), (req) => [req.body]))
  app.get('/route-fail', offload.route(ops('fail'), () => 'route task failed'))
  app.get('/route-empty', offload.route(() => undefined))
  app.use(offload.errorHandler())

  it('runs inline, async and module tasks', async () => {
    assert.deepEqual((await request(app).get('/mul?a=6&b=7').expect(200)).body, { result: 42 })
    assert.deepEqual((await request(app).get('/async').expect(200)).body, { result: 42 })
    assert.deepEqual((await request(app).get('/module').expect(200)).body, { result: 42 })
  })

  it("task errors go through next(err): 500 with the task's message", async () => {
    const res = await request(app).get('/fail').expect(500)
    assert.equal(res.body.error, 'task went wrong')
    assert.equal(res.body.code, 'E_TASK_FAILED')
    assert.match(res.body.stack, /task went wrong/)
  })

  it('hides the stack in production', async () => {
    const saved = process.env.NODE_ENV
    process.env.NODE_ENV = 'production'
    try {
      const res = await request(app).get('/route-fail').expect(500)
      assert.equal(res.body.error, 'route task failed')
      assert.equal(res.body.stack, undefined)
    } finally {
      if (saved === undefined) delete process.env.NODE_ENV
      else process.env.NODE_ENV = saved
    }
  })

  it('a closure-capturing function gets the clear error', async () => {
    const res = await request(app).get('/closure').expect(500)
    assert.ok(res.body.error.includes('offloaded functions cannot use outer variables; pass them as arguments'))
    assert.ok(res.body.error.includes('"factor"'))
  })

  it('offload.route sends the result as JSON, errors as JSON, undefined as 204', async () => {
    assert.deepEqual((await request(app).post('/route').send({ a: 2, b: 3 }).expect(200)).body, { sum: 5 })
    const res = await request(app).get('/route-fail').expect(500)
    assert.equal(res.body.error, 'route task failed')
    await request(app).get('/route-empty').expect(204)
  })

  it('offload.route works without the middleware (shared default pool)', async () => {
    const bare = express()
    bare.get('/sq/:n', offload.route(offload.task(path.join(tasks, 'square.js')), (req) => Number(req.params.n)))
    assert.deepEqual((await request(bare).get('/sq/12').expect(200)).body, 144)
  })
})

describe('backpressure, timeouts, disconnects', () => {
  it('a saturated pool answers 503 + Retry-After and keeps serving', async () => {
    const m = mw({ threads: 1, maxQueue: 1 })
    const app = express()
    app.use(m)
    app.get('/slow', offload.route(ops('sleep'), (req) => [Number(req.query.ms)]))
    const server = await listen(app)
    const first = rawGet(server, '/slow?ms=200')
    await until(m, (s) => s.busy === 1)
    const second = rawGet(server, '/slow?ms=10')
    await until(m, (s) => s.queued === 1)
    const res = await request(server).get('/slow?ms=10').expect(503)
    assert.ok(Number(res.headers['retry-after']) >= 1)
    assert.equal(res.body.code, 'ERR_CLUSTERIZE_OFFLOAD_QUEUE_FULL')
    assert.deepEqual(await first.done, { status: 200, body: '200' })
    assert.deepEqual(await second.done, { status: 200, body: '10' })
    assert.equal((await request(server).get('/slow?ms=1').expect(200)).body, 1)
  })

  it('req.offload users get Retry-After from Express default error handler', async () => {
    const m = mw({ threads: 1, maxQueue: 0 })
    const app = express()
    app.set('env', 'test') // keep finalhandler from logging the 503
    app.use(m)
    app.get('/slow', async (req, res) => { res.json(await req.offload(ops('sleep'), Number(req.query.ms))) })
    const server = await listen(app)
    const first = rawGet(server, '/slow?ms=150')
    await until(m, (s) => s.busy === 1)
    const res = await request(server).get('/slow?ms=1').expect(503)
    assert.ok(Number(res.headers['retry-after']) >= 1)
    assert.equal((await first.done).status, 200)
  })

  it('a task that runs past taskTimeoutMs answers 503; the next request succeeds', async () => {
    const m = mw({ threads: 1, taskTimeoutMs: 150 })
    const app = express()
    app.use(m)
    app.get('/spin', offload.route(ops('spinForever'), () => []))
    app.get('/ok', offload.route((n) => n + 1, () => 1))
    const res = await request(app).get('/spin').expect(503)
    assert.equal(res.body.code, 'ERR_CLUSTERIZE_OFFLOAD_TIMEOUT')
    assert.equal((await request(app).get('/ok').expect(200)).body, 2)
    assert.equal(m.stats().timedOut, 1)
  })

  it('a client that disconnects removes its queued task', async () => {
    const m = mw({ threads: 1 })
    const app = express()
    app.use(m)
    app.get('/slow', offload.route(ops('sleep'), (req) => [Number(req.query.ms)]))
    const server = await listen(app)
    const first = rawGet(server, '/slow?ms=300')
    await until(m, (s) => s.busy === 1)
    const second = rawGet(server, '/slow?ms=10')
    await until(m, (s) => s.queued === 1)
    second.destroy()
    await until(m, (s) => s.queued === 0 && s.cancelled === 1)
    assert.equal((await first.done).status, 200)
    assert.equal(m.stats().completed, 1) // the cancelled task never ran
  })

  it('with terminateOnDisconnect a disconnect stops the running task', async () => {
    const m = mw({ threads: 1, terminateOnDisconnect: true })
    const app = express()
    app.use(m)
    app.get('/spin', offload.route(ops('spinForever'), () => []))
    app.get('/ok', offload.route((n) => n + 1, () => 1))
    const server = await listen(app)
    const spin = rawGet(server, '/spin')
    await until(m, (s) => s.busy === 1)
    spin.destroy()
    await until(m, (s) => s.cancelled === 1 && s.replaced === 1)
    assert.equal((await request(server).get('/ok').expect(200)).body, 2)
  })

  it('graceful close waits for the running task to finish', async () => {
    const m = offload({ threads: 1 })
    const app = express()
    app.use(m)
    app.get('/slow', offload.route(ops('sleep'), () => [150, 'finished']))
    const server = await listen(app)
    const pending = rawGet(server, '/slow')
    await until(m, (s) => s.busy === 1)
    assert.deepEqual(await registry.closeAll({ timeoutMs: 5000 }), undefined)
    assert.deepEqual(await pending.done, { status: 200, body: '"finished"' })
    assert.equal(m.stats().threads, 0)
  })
})

describe('options', () => {
  it('bad options throw at creation naming the option', () => {
    assert.throws(() => offload({ threads: 0 }), { message: 'offload: option "threads" must be a positive integer, got 0' })
    assert.throws(() => offload({ cancelOnDisconnect: 'yes' }), /option "cancelOnDisconnect" must be true or false, got "yes"/)
    assert.throws(() => offload({ taskTimeoutMs: -1 }), /option "taskTimeoutMs" must be an integer from 0 to 2147483647, got -1/)
    assert.throws(() => offload.route(Math.max), /native or bound function/)
    assert.throws(() => offload.route((a) => a, 'nope'), /mapReq must be a function/)
  })
})
