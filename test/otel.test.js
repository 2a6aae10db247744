'use strict'

/**
 * OpenTelemetry under clusterize: an app that runs the Node SDK with the
 * http and Express instrumentations (its own tracing.js, `--require`d) gets
 * the same spans from every worker as it gets without clusterize, each
 * worker's with its slot and generation as resource attributes, and a span
 * started in a `req.offload()` thread is a child of the request's span.
 * The SDK's in-memory exporter, written through to a file per process and
 * thread (test/fixtures/otel/tracing.js).
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { fork } = require('child_process')
const fs = require('fs')
const http = require('http')
const os = require('os')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { withResourceAttributes } = require('../lib/telemetry')

const TRACING = path.join(__dirname, 'fixtures/otel/tracing.js')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-otel-'))
const plainChildren = []

after(async () => {
  await stopAll()
  for (const child of plainChildren) if (child.exitCode === null) child.kill('SIGKILL')
  fs.rmSync(tmp, { recursive: true, force: true })
})

function get (port, urlPath) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: urlPath, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve(JSON.parse(body)))
    }).on('error', reject)
  })
}

/** Every span written under `dir`, by every process and thread. */
function readSpans (dir) {
  return fs.readdirSync(dir).flatMap((file) => fs.readFileSync(path.join(dir, file), 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line)))
}

/** What makes two traces of the same request the same: each span's name, kind, scope and route, parents by name. */
function shape (spans, traceId) {
  const inTrace = spans.filter((span) => span.traceId === traceId)
  const byId = new Map(inTrace.map((span) => [span.spanId, span]))
  return inTrace.map((span) => {
    const parent = byId.get(span.parentSpanId)
    return `${span.scope} ${span.kind} ${span.name} route=${span.attributes['http.route'] || '-'} parent=${parent ? parent.name : '-'}`
  }).sort()
}

function serverSpan (spans, pid, name) {
  return spans.find((span) => span.pid === pid && span.kind === 1 && span.name === name)
}

test('the same http and Express spans from every worker as without clusterize, with slot and generation; offload() threads continue the trace', async () => {
  // Without clusterize: the app's own listen().
  const plainDir = fs.mkdtempSync(path.join(tmp, 'plain-'))
  const plain = fork(path.join(__dirname, 'fixtures/otel/plain.js'), [], { execArgv: ['--require', TRACING], env: Object.assign({}, process.env, { CZ_OTEL_DIR: plainDir }), stdio: 'ignore' })
  plainChildren.push(plain)
  const { port: plainPort } = await new Promise((resolve) => plain.once('message', resolve))
  const plainUser = await get(plainPort, '/users/7')
  const plainOffload = await get(plainPort, '/offload')
  let expected
  await eventually(() => {
    const spans = readSpans(plainDir)
    const user = serverSpan(spans, plainUser.pid, 'GET /users/:id')
    const off = serverSpan(spans, plainOffload.pid, 'GET /offload')
    if (!user || !off || shape(spans, off.traceId).length < 4) return false
    expected = { user: shape(spans, user.traceId), offload: shape(spans, off.traceId) }
    return true
  }, { timeoutMs: 20000, what: 'the plain app\'s spans' })
  plain.kill('SIGTERM')
  // The reference itself: route spans, and the thread's span under the request handler.
  assert.ok(expected.user.includes('@opentelemetry/instrumentation-http 1 GET /users/:id route=/users/:id parent=-'), expected.user.join('\n'))
  assert.ok(expected.user.includes('@opentelemetry/instrumentation-express 0 request handler route=/users/:id parent=GET /users/:id'), expected.user.join('\n'))
  assert.ok(expected.offload.includes('offload-test 0 work in the thread route=- parent=request handler'), expected.offload.join('\n'))

  // Under clusterize, two workers.
  const clusterDir = fs.mkdtempSync(path.join(tmp, 'cluster-'))
  const cluster = await startCluster(path.join(__dirname, 'fixtures/otel/cluster.js'), { execArgv: ['--require', TRACING], env: { CZ_OTEL_DIR: clusterDir } })
  try {
    const answers = []
    const workerPids = new Set(cluster.workerPids)
    // New connections alternate between the workers: three requests a round, until each has answered both routes.
    await eventually(async () => {
      answers.push({ route: 'user', answer: await get(cluster.port, '/users/7') })
      answers.push({ route: 'offload', answer: await get(cluster.port, '/offload') })
      answers.push({ route: 'offload', answer: await get(cluster.port, '/offload') })
      return [...workerPids].every((pid) => answers.some((a) => a.route === 'user' && a.answer.pid === pid) && answers.some((a) => a.route === 'offload' && a.answer.pid === pid))
    }, { timeoutMs: 30000, intervalMs: 10, what: () => 'both workers to answer both routes: ' + JSON.stringify([...workerPids]) + JSON.stringify(answers.slice(-6)) + cluster.output })
    const slots = new Set()
    await eventually(() => {
      const spans = readSpans(clusterDir)
      for (const pid of workerPids) {
        const user = serverSpan(spans, pid, 'GET /users/:id')
        const off = serverSpan(spans, pid, 'GET /offload')
        if (!user || !off || shape(spans, off.traceId).length < expected.offload.length) return false
      }
      return true
    }, { timeoutMs: 20000, what: 'every worker\'s spans' })
    const spans = readSpans(clusterDir)
    for (const pid of workerPids) {
      const user = serverSpan(spans, pid, 'GET /users/:id')
      const off = serverSpan(spans, pid, 'GET /offload')
      assert.deepStrictEqual(shape(spans, user.traceId), expected.user, `worker ${pid}: /users/:id`)
      assert.deepStrictEqual(shape(spans, off.traceId), expected.offload, `worker ${pid}: /offload`)
      // The thread's span is in the worker's trace, under its request handler, from another thread.
      const work = spans.find((span) => span.traceId === off.traceId && span.name === 'work in the thread')
      assert.strictEqual(work.pid, pid)
      assert.notStrictEqual(work.thread, off.thread)
      assert.strictEqual(spans.find((span) => span.spanId === work.parentSpanId).name, 'request handler')
      assert.strictEqual(user.resource['clusterize.worker.generation'], '1')
      slots.add(user.resource['clusterize.worker.slot'])
    }
    assert.deepStrictEqual([...slots].sort(), ['0', '1'])
  } finally {
    await cluster.stop()
  }
})

test('the worker attributes come after the app\'s own OTEL_RESOURCE_ATTRIBUTES', () => {
  const env = { CLUSTERIZE_WORKER_ID: '3', CLUSTERIZE_GENERATION: '2' }
  assert.strictEqual(withResourceAttributes(env, 'service.name=shop,deployment.environment=prod').OTEL_RESOURCE_ATTRIBUTES,
    'service.name=shop,deployment.environment=prod,clusterize.worker.slot=3,clusterize.worker.generation=2')
  assert.strictEqual(withResourceAttributes(env, undefined).OTEL_RESOURCE_ATTRIBUTES, 'clusterize.worker.slot=3,clusterize.worker.generation=2')
  assert.strictEqual(env.OTEL_RESOURCE_ATTRIBUTES, undefined, 'the fork environment given is not changed')
})
