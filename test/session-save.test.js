'use strict'

/**
 * A response is acknowledged only once its session write is stored: when the
 * store fails the save, touch or destroy that follows res.end(), the client
 * gets 503 (and the log a line), never the app's 200. Real express-session
 * with a real MemoryStore whose writes can be made to fail.
 */

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const http = require('http')
const express = require('express')
const request = require('supertest')
const { MemoryStore } = require('express-session')
const session = require('../middleware/session')
const { setSessionLogger } = require('../lib/session/log')
const { createLogger } = require('../lib/logger')

const SECRET = 'save-test-secret-0123456789-abcdefghijkl'

/** A MemoryStore whose set/touch/destroy fail while `failing` is set. */
class FlakyStore extends MemoryStore {
  constructor () {
    super()
    this.failing = null
  }

  set (sid, sess, cb) {
    if (this.failing) return setImmediate(cb, new Error(`${this.failing}: set refused`))
    super.set(sid, sess, cb)
  }

  touch (sid, sess, cb) {
    if (this.failing) return setImmediate(cb, new Error(`${this.failing}: touch refused`))
    super.touch(sid, sess, cb)
  }

  destroy (sid, cb) {
    if (this.failing) return setImmediate(cb, new Error(`${this.failing}: destroy refused`))
    super.destroy(sid, cb)
  }
}

function makeApp (store) {
  const app = express()
  app.use(session({ store, secret: SECRET }))
  app.get('/count', function count (req, res) {
    req.session.n = (req.session.n || 0) + 1
    res.set('X-App', 'yes').json({ n: req.session.n })
  })
  app.get('/redirect', function redirect (req, res) {
    req.session.n = (req.session.n || 0) + 1
    res.redirect(303, '/count')
  })
  app.get('/read', function read (req, res) {
    res.json({ n: req.session.n || 0 })
  })
  app.get('/stream', function stream (req, res) {
    req.session.n = (req.session.n || 0) + 1
    res.writeHead(200, { 'Content-Type': 'text/plain' })
    res.write('part one\n')
    setImmediate(() => res.end('part two\n'))
  })
  app.post('/logout', function logout (req, res) {
    req.session.destroy(function destroyed (err) {
      if (err) return res.status(err.status || 500).json({ error: err.message })
      res.json({ ok: true })
    })
  })
  return app
}

describe('a session write that is not stored is never a 200', () => {
  const lines = []
  const store = new FlakyStore()
  const app = makeApp(store)

  before(() => {
    const keep = (level) => (fields, msg) => lines.push(`${level} ${msg}`)
    setSessionLogger(createLogger({ debug () {}, info: keep('info'), warn: keep('warn'), error: keep('error') }))
  })
  after(() => setSessionLogger(null))

  /** A logged-in agent's request made while the store refuses writes with `reason`. */
  async function whileRefusing (reason, send) {
    const agent = request.agent(app)
    await agent.get('/count').expect(200)
    store.failing = reason
    try {
      return await send(agent)
    } finally {
      store.failing = null
    }
  }

  it('a save that fails after res.json() gives 503 with the reason, no cookie and a log line', async () => {
    const agent = request.agent(app)
    assert.equal((await agent.get('/count').expect(200)).body.n, 1)
    store.failing = 'disk full'
    lines.length = 0
    const res = await agent.get('/count')
    assert.equal(res.status, 503, res.text)
    assert.match(res.body.error, /^session store unavailable: .*disk full: set refused/)
    assert.equal(res.headers['retry-after'], '1')
    assert.equal(res.headers['set-cookie'], undefined)
    assert.equal(res.headers['x-app'], undefined, 'the headers of the response that was not sent are dropped')
    assert.equal(lines.length, 1, lines.join('\n'))
    assert.match(lines[0], /^warn session not stored for GET \/count: .*disk full: set refused; the request got 503/)
    store.failing = null
    assert.equal((await agent.get('/read').expect(200)).body.n, 1, 'the refused write was not stored')
    assert.equal((await agent.get('/count').expect(200)).body.n, 2)
  })

  it('a redirect whose save fails is a 503, not a 303', async () => {
    const res = await whileRefusing('quota', (agent) => agent.get('/redirect'))
    assert.equal(res.status, 503)
    assert.equal(res.headers.location, undefined)
  })

  it('a touch that fails (an unmodified session) is a 503 too', async () => {
    const res = await whileRefusing('touchy', (agent) => agent.get('/read'))
    assert.equal(res.status, 503)
    assert.match(res.body.error, /touchy: touch refused/)
  })

  it("a logout by `req.session = null` (unset: 'destroy') whose destroy fails is not acknowledged", async () => {
    const forgetting = express()
    forgetting.use(session({ store, secret: SECRET, unset: 'destroy' }))
    forgetting.get('/count', function count (req, res) {
      req.session.n = (req.session.n || 0) + 1
      res.json({ n: req.session.n })
    })
    forgetting.post('/forget', function forget (req, res) {
      req.session = null
      res.json({ ok: true })
    })
    const agent = request.agent(forgetting)
    await agent.get('/count').expect(200)
    store.failing = 'locked'
    const res = await agent.post('/forget')
    store.failing = null
    assert.equal(res.status, 503, res.text)
    assert.match(res.body.error, /locked: destroy refused/)
    assert.equal((await agent.get('/count').expect(200)).body.n, 2, 'still logged in, as the 503 said')
  })

  it('a streamed response (headers already sent) whose save fails is cut off, with an error line', async () => {
    const agent = request.agent(app)
    const first = await agent.get('/count').expect(200)
    const cookie = first.headers['set-cookie'][0].split(';')[0]
    store.failing = 'stream'
    lines.length = 0
    const server = http.createServer(app)
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const outcome = await new Promise((resolve) => {
        const req = http.get({ host: '127.0.0.1', port: server.address().port, path: '/stream', headers: { cookie } }, (res) => {
          let body = ''
          res.setEncoding('utf8')
          res.on('data', (chunk) => { body += chunk })
          res.on('end', () => resolve({ complete: res.complete, body }))
          res.on('error', (err) => resolve({ error: err.message, body }))
          res.on('aborted', () => resolve({ aborted: true, body }))
        })
        req.on('error', (err) => resolve({ error: err.message }))
      })
      assert.notEqual(outcome.complete, true, `the client must not see a complete response: ${JSON.stringify(outcome)}`)
      assert.doesNotMatch(outcome.body || '', /part two/)
      assert.ok(lines.some((l) => /^error session not stored for GET \/stream: .*stream: set refused; the response had already started, so it was cut off/.test(l)), lines.join('\n'))
    } finally {
      store.failing = null
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('responses whose session is stored are unchanged (status, headers, body, cookie)', async () => {
    const res = await request(app).get('/count')
    assert.equal(res.status, 200)
    assert.equal(res.headers['x-app'], 'yes')
    assert.deepEqual(res.body, { n: 1 })
    assert.match(res.headers['set-cookie'][0], /^connect\.sid=/)
    const redirect = await request(app).get('/redirect')
    assert.equal(redirect.status, 303)
    assert.equal(redirect.headers.location, '/count')
  })
})

describe('with our own store, the response leaves as soon as the write is stored', () => {
  /**
   * An app on the cluster store (in-process backend) whose store callbacks are observed: `ends`
   * records, right after express-session's callback returns, whether the response had ended.
   */
  function observedApp (options) {
    const app = express()
    const middleware = session(Object.assign({ store: 'cluster', secret: SECRET, prefix: `save-test-${Math.random()}:` }, options))
    const ends = []
    const set = middleware.store.set
    middleware.store.set = function observedSet (sid, sess, cb) {
      const res = sess.req && sess.req.res
      return set.call(this, sid, sess, function stored (err) {
        cb(err)
        ends.push({ err: err ? err.message : null, endedInCallback: Boolean(res && res.writableEnded) })
      })
    }
    app.use(middleware)
    app.get('/count', function count (req, res) {
      req.session.n = (req.session.n || 0) + 1
      res.json({ n: req.session.n })
    })
    app.get('/big', function big (req, res) {
      req.session.blob = 'x'.repeat(4000)
      res.json({ ok: true })
    })
    return { app, ends }
  }

  it('a stored session releases the held response inside the store callback, not a loop turn later', async () => {
    const { app, ends } = observedApp()
    const agent = request.agent(app)
    assert.equal((await agent.get('/count').expect(200)).body.n, 1)
    assert.equal((await agent.get('/count').expect(200)).body.n, 2)
    assert.deepEqual(ends, [{ err: null, endedInCallback: true }, { err: null, endedInCallback: true }])
  })

  it('a write refused inside the callback of the read that ran the route is still a 413, never a 200', async () => {
    const { app, ends } = observedApp({ maxSessionBytes: 1000 })
    const agent = request.agent(app)
    await agent.get('/count').expect(200)
    // /big runs inside the cluster store's successful get callback; its set is refused synchronously.
    const res = await agent.get('/big')
    assert.equal(res.status, 413, res.text)
    assert.match(res.body.error, /maxSessionBytes/)
    assert.equal(ends.length, 2)
    assert.equal(ends[1].endedInCallback, false, 'held until the error arrived')
    assert.match(ends[1].err, /maxSessionBytes/)
  })
})
