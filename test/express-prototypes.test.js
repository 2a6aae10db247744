'use strict'

// lib/worker/express-prototypes.js: a worker's server builds an Express app's
// req and res on app.request and app.response, so Express's prototype swap
// changes nothing (V8 before 13.6 slows down every object whose prototype was
// swapped). Behaviour is checked with `force` on every Node line; the decision
// itself (only before V8 13.6) through loadApp, the function a worker calls.

const { test } = require('node:test')
const assert = require('node:assert')
const http = require('http')
const express5 = require('express')
const express4 = require('express4')
const { expressServerOptions, slowPrototypeSwap, callableConstructor } = require('../lib/worker/express-prototypes')
const { loadApp } = require('../lib/worker/load-app')

function listen (server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)))
}

function close (server) {
  return new Promise((resolve) => server.close(resolve))
}

function get (port, path, headers) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path, headers, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }))
    }).on('error', reject)
  })
}

/** An app that reports, per request, what it sees of req and res. */
function reportingApp (express) {
  const app = express()
  const sub = express()
  sub.get('/where', (req, res, next) => {
    res.locals.inSub = Object.getPrototypeOf(req) === sub.request && req.app === sub
    next()
  })
  app.use('/sub', sub)
  app.get('/sub/where', (req, res) => {
    // After the sub-app hands back, Express restores the parent's prototypes.
    res.json({ inSub: res.locals.inSub, backInParent: Object.getPrototypeOf(req) === app.request && Object.getPrototypeOf(res) === app.response })
  })
  app.get('/report', (req, res) => {
    res.set('x-report', 'yes')
    res.status(201).json({
      host: req.get('host'),
      query: req.query.q,
      hasLocals: typeof res.locals === 'object',
      isIncoming: req instanceof http.IncomingMessage,
      isResponse: res instanceof http.ServerResponse,
      custom: typeof req.custom === 'function' ? req.custom() : null
    })
  })
  return app
}

for (const [name, express] of [['express 5', express5], ['express 4', express4]]) {
  test(`${name}: req and res are built on the app's prototypes and behave as Express's own`, async () => {
    const app = reportingApp(express)
    const options = expressServerOptions(app, { force: true })
    assert.ok(options, 'an Express app gets server options')
    const server = http.createServer(options, app)
    let builtOnApp = null
    server.prependListener('request', (req, res) => {
      builtOnApp = Object.getPrototypeOf(req) === app.request && Object.getPrototypeOf(res) === app.response
    })
    const port = await listen(server)
    try {
      const report = await get(port, '/report?q=42')
      assert.strictEqual(builtOnApp, true, 'req and res carry the app\'s prototypes before Express runs')
      assert.strictEqual(report.status, 201)
      assert.strictEqual(report.headers['x-report'], 'yes')
      assert.deepStrictEqual(JSON.parse(report.body), {
        host: `127.0.0.1:${port}`, query: '42', hasLocals: true, isIncoming: true, isResponse: true, custom: null
      })

      const where = await get(port, '/sub/where')
      assert.deepStrictEqual(JSON.parse(where.body), { inSub: true, backInParent: true }, 'a mounted sub-app gets its own prototypes and gives the parent\'s back')

      // An app whose request prototype is replaced after the server exists: Express's swap still applies it.
      const replaced = Object.create(app.request)
      replaced.custom = function custom () { return 'from the new prototype' }
      app.request = replaced
      const after = await get(port, '/report')
      assert.strictEqual(builtOnApp, false, 'the server still builds on the old prototype')
      assert.strictEqual(JSON.parse(after.body).custom, 'from the new prototype')
    } finally {
      await close(server)
    }
  })
}

test('a listener that is not an Express app, or an app without Express\'s prototypes, gets no options', () => {
  assert.strictEqual(expressServerOptions((req, res) => res.end(), { force: true }), null)
  const fake = Object.assign((req, res) => res.end(), { request: {}, response: {} })
  assert.strictEqual(expressServerOptions(fake, { force: true }), null)
  const halfFake = Object.assign((req, res) => res.end(), { request: Object.create(http.IncomingMessage.prototype), response: null })
  assert.strictEqual(expressServerOptions(halfFake, { force: true }), null)
})

test('a Node whose IncomingMessage or ServerResponse is a class keeps its own (our constructors call them as functions)', () => {
  assert.strictEqual(callableConstructor(http.IncomingMessage), true)
  assert.strictEqual(callableConstructor(function Plain () {}), true)
  assert.strictEqual(callableConstructor(class Modern {}), false)
  assert.strictEqual(callableConstructor(undefined), false)
  const original = http.IncomingMessage
  // IncomingMessage as a class, as a future Node might ship it, and an app whose request inherits from it.
  const ClassMessage = class IncomingMessage extends original {}
  const app = Object.assign((req, res) => res.end(), {
    request: Object.create(ClassMessage.prototype),
    response: Object.create(http.ServerResponse.prototype)
  })
  http.IncomingMessage = ClassMessage
  try {
    assert.strictEqual(expressServerOptions(app, { force: true }), null)
  } finally {
    http.IncomingMessage = original
  }
  assert.notStrictEqual(expressServerOptions(express5(), { force: true }), null)
})

test('only V8 before 13.6 (Node 23 and older) slows down swapped prototypes', () => {
  assert.strictEqual(slowPrototypeSwap('11.3.244.8-node.33'), true) // Node 20
  assert.strictEqual(slowPrototypeSwap('12.4.254.21-node.33'), true) // Node 22
  assert.strictEqual(slowPrototypeSwap('13.5.212.10'), true)
  assert.strictEqual(slowPrototypeSwap('13.6.233.17-node.37'), false) // Node 24
  assert.strictEqual(slowPrototypeSwap('14.1.146.11-node.1'), false)
})

test('loadApp gives an Express app\'s server the prototypes exactly when this Node\'s V8 needs them', async () => {
  const app = reportingApp(express5)
  const { server } = await loadApp(() => app)
  let builtOnApp = null
  server.prependListener('request', (req) => { builtOnApp = Object.getPrototypeOf(req) === app.request })
  const port = await listen(server)
  try {
    const report = await get(port, '/report?q=x')
    assert.strictEqual(report.status, 201)
    assert.strictEqual(builtOnApp, slowPrototypeSwap(), `V8 ${process.versions.v8}`)
  } finally {
    await close(server)
  }
})

test('loadApp leaves an http.Server the app built itself as it is', async () => {
  const app = reportingApp(express5)
  const own = http.createServer(app)
  const { server } = await loadApp(() => own)
  assert.strictEqual(server, own)
  let builtOnApp = null
  server.prependListener('request', (req) => { builtOnApp = Object.getPrototypeOf(req) === app.request })
  const port = await listen(server)
  try {
    await get(port, '/report')
    assert.strictEqual(builtOnApp, false)
  } finally {
    await close(server)
  }
})
