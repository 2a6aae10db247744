'use strict'

/**
 * OpenTelemetry under clusterize: an app traced by its own tracing.js
 * (`--require`, here through NODE_OPTIONS, with the http and Express
 * instrumentations and the SDK's in-memory exporter) produces the same spans
 * on every worker as in a plain `node` process, routes included (on Node 22
 * the worker builds req/res on Express's prototypes), with the worker's slot
 * and generation as resource attributes; and a span started in an offloaded
 * task is a child of the request's span.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const { spawn } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { freePort, waitForPort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { runCli, startCli, httpGet: get, cliScratch } = require('./helpers/cli')
const { workerResourceAttributes } = require('../lib/primary/trace-resource')

const TRACING = path.join(__dirname, 'fixtures', 'otel', 'tracing.js')
const APP = path.join(__dirname, 'fixtures', 'otel', 'app.js')
const ROOT = path.join(__dirname, '..')
const { tmp, tracked } = cliScratch('otel')

const ENV = { NODE_OPTIONS: `--require ${TRACING}`, OTEL_RESOURCE_ATTRIBUTES: 'service.name=otel-test' }

/** The spans of the trace whose server span served `urlPath`, as comparable rows. */
function traceOf (spans, urlPath) {
  const server = spans.find((s) => s.kind === 1 && s.attributes['url.path'] === urlPath)
  assert.ok(server, `a server span for ${urlPath} in ${JSON.stringify(spans.map((s) => s.name))}`)
  return {
    server,
    rows: spans.filter((s) => s.traceId === server.traceId)
      .map((s) => `${s.name} kind=${s.kind} route=${s.attributes['http.route'] || '-'} child=${s.parentSpanId === server.spanId}`)
      .sort()
  }
}

/**
 * GET /spans until every pid in `pids` answered with what `complete(byPid)` wants (a span is
 * exported when its request ends, which can be just after the client read the answer).
 * @returns {Promise<Map<number, object[]>>} pid -> its finished spans
 */
async function spansOf (port, pids, complete) {
  const byPid = new Map()
  await eventually(async () => {
    const res = await get(port, '/spans')
    assert.strictEqual(res.status, 200, res.body)
    byPid.set(res.json.pid, res.json.spans)
    return [...pids].every((pid) => byPid.has(pid)) && complete(byPid)
  }, { timeoutMs: 30000, intervalMs: 10, what: () => 'spans from every worker: ' + JSON.stringify([...byPid].map(([pid, spans]) => [pid, spans.map((s) => s.name)])) })
  return byPid
}

/** Whether `spans` hold the server span of a request to `urlPath` (in the trace `traceId`, when given). */
function served (spans, urlPath, traceId) {
  return spans.some((s) => s.kind === 1 && s.attributes['url.path'] === urlPath && (traceId === undefined || s.traceId === traceId))
}

test('the resource attributes a worker is forked with: slot and generation, the app\'s own keys kept and winning', () => {
  assert.strictEqual(workerResourceAttributes(undefined, { slot: 1, generation: 3 }), 'clusterize.worker.slot=1,clusterize.worker.generation=3')
  assert.strictEqual(workerResourceAttributes('service.name=api, deployment.environment=prod', { slot: 0, generation: 1 }),
    'service.name=api,deployment.environment=prod,clusterize.worker.slot=0,clusterize.worker.generation=1')
  assert.strictEqual(workerResourceAttributes('clusterize.worker.slot=9', { slot: 0, generation: 2 }), 'clusterize.worker.slot=9,clusterize.worker.generation=2')
})

test('spans from every worker match a plain node process, with slot and generation; offloaded work is a child of the request', async () => {
  // The same app and tracing.js in one plain process: the reference.
  const plainPort = await freePort()
  const plain = spawn(process.execPath, ['-e', `require(${JSON.stringify(APP)}).listen(${plainPort}, '127.0.0.1')`], { cwd: ROOT, env: Object.assign({}, process.env, ENV), stdio: 'ignore' })
  tracked.add(plain.pid)
  await waitForPort(plainPort, { timeoutMs: 20000 })
  assert.strictEqual((await get(plainPort, '/users/7')).status, 200)
  const plainSpans = (await spansOf(plainPort, [], (byPid) => [...byPid.values()].some((spans) => served(spans, '/users/7')))).values().next().value
  plain.kill('SIGKILL')
  const reference = traceOf(plainSpans, '/users/7').rows
  assert.ok(reference.some((row) => row.startsWith('GET /users/:id kind=1 route=/users/:id')), reference.join('\n'))

  const port = await freePort()
  const pidFile = path.join(tmp, 'otel.pid')
  const cli = await startCli([APP, '--workers', '2', '--port', String(port), '--host', '127.0.0.1', '--pid-file', pidFile], { cwd: ROOT, pidFile, tracked, env: ENV })
  try {
    const status = await runCli(['status', '--pid-file', pidFile, '--json'], { cwd: ROOT })
    const slotOf = new Map(JSON.parse(status.stdout).workers.map((w) => [w.pid, w.id]))
    for (const pid of slotOf.keys()) tracked.add(pid)
    assert.strictEqual(slotOf.size, 2)

    // Each request on a new connection: until each worker has served /users/7 and /work.
    const servedUsers = new Set()
    const offloaded = new Map()
    const workedOn = new Set()
    await eventually(async () => {
      const user = await get(port, '/users/7')
      assert.strictEqual(user.status, 200, user.body)
      servedUsers.add(user.json.pid)
      return servedUsers.size === 2
    }, { timeoutMs: 30000, intervalMs: 10, what: '/users/7 on both workers' })
    await eventually(async () => {
      const work = await get(port, '/work')
      assert.strictEqual(work.status, 200, work.body)
      offloaded.set(work.json.traceId, work.json.parentSpanId)
      workedOn.add(work.json.pid)
      return workedOn.size === 2
    }, { timeoutMs: 30000, intervalMs: 10, what: '/work on both workers' })

    // Every worker's /users/7, and every offloaded request's own spans.
    const byPid = await spansOf(port, slotOf.keys(), (got) => {
      const all = [...got.values()].flat()
      return [...got.values()].every((spans) => served(spans, '/users/7')) && [...offloaded.keys()].every((traceId) => served(all, '/work', traceId))
    })
    for (const [pid, spans] of byPid) {
      const { server, rows } = traceOf(spans, '/users/7')
      assert.deepStrictEqual(rows, reference, `worker ${pid}: the same spans as a plain process`)
      assert.strictEqual(server.resource['clusterize.worker.slot'], String(slotOf.get(pid)), `worker ${pid}: its slot (OTEL_RESOURCE_ATTRIBUTES values are strings)`)
      assert.strictEqual(server.resource['clusterize.worker.generation'], '1')
      assert.strictEqual(server.resource['service.name'], 'otel-test', 'the app\'s own resource attributes are kept')
    }

    // Each offloaded task's span has the request's trace and a parent inside it, on the worker that served it.
    const all = [...byPid.values()].flat()
    assert.ok(offloaded.size >= 2, `offloaded requests: ${offloaded.size}`)
    for (const [traceId, parentSpanId] of offloaded) {
      const inTrace = all.filter((s) => s.traceId === traceId)
      assert.ok(parentSpanId, `the task's span for trace ${traceId} has a parent`)
      assert.ok(inTrace.some((s) => s.spanId === parentSpanId), `the task's parent ${parentSpanId} is a span of the request's trace: ${JSON.stringify(inTrace.map((s) => [s.name, s.spanId]))}`)
    }
  } finally {
    cli.child.kill('SIGTERM')
    await cli.exited
  }
})
