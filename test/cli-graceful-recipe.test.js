'use strict'

/**
 * PM2's graceful-stop recipe under clusterize: an app that does
 * `const server = app.listen(PORT)` and, on SIGINT, `server.close(() =>
 * process.exit(0))`. The server it gets stands in for the one clusterize
 * serves (lib/worker/app-server.js), so a Ctrl-C (SIGINT to the CLI's whole
 * process group) lets every request in flight finish. An app that exits at
 * once instead cuts them, and the log says so rather than a clean shutdown.
 * Loopback only; every process started here is killed by PID in `after`.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const http = require('http')
const os = require('os')
const path = require('path')
const { freePort } = require('./helpers/net')
const { startCli, runCli, cliScratch } = require('./helpers/cli')

const APP = path.join(__dirname, 'fixtures', 'graceful-recipe-app.js')
const { tmp, tracked } = cliScratch('graceful')

/** GET /slow; resolves `started` at its first line, `done` with the whole body or the error that cut it. */
function slowRequest (port) {
  let onStarted
  const started = new Promise((resolve) => { onStarted = resolve })
  const done = new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/slow', agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => {
        body += chunk
        onStarted()
      })
      res.on('end', () => resolve({ status: res.statusCode, body }))
      res.on('error', (err) => resolve({ error: err.code || err.message, body }))
    })
    req.on('error', (err) => {
      onStarted()
      resolve({ error: err.code || err.message })
    })
  })
  return { started, done }
}

async function startApp (name, env) {
  const port = await freePort()
  const pidFile = path.join(tmp, name + '.pid')
  const cli = await startCli([APP, '--workers', '2', '--host', '127.0.0.1', '--pid-file', pidFile], { cwd: tmp, pidFile, tracked, detached: true, env: Object.assign({ PORT: String(port) }, env) })
  const status = JSON.parse((await runCli(['status', '--pid-file', pidFile, '--json'], { cwd: tmp })).stdout)
  for (const worker of status.workers) tracked.add(worker.pid)
  return { cli, port }
}

/** Four slow requests in flight, then Ctrl-C: SIGINT to the primary and its workers at once. */
async function ctrlCWithRequestsInFlight ({ cli, port }) {
  const requests = [1, 2, 3, 4].map(() => slowRequest(port))
  await Promise.all(requests.map((r) => r.started))
  process.kill(-cli.child.pid, 'SIGINT')
  const results = await Promise.all(requests.map((r) => r.done))
  return { results, exit: await cli.exited }
}

test("PM2's recipe, server.close(() => process.exit(0)) on SIGINT: Ctrl-C lets the requests in flight finish", async () => {
  const app = await startApp('recipe', { CZ_REPORT_ADDRESS: '1' })
  assert.match(app.cli.output, new RegExp(`app listening on ${app.port}`), "the app's listen callback ran with clusterize's port")
  assert.match(app.cli.output, /the app's server stands in for it/)
  const { results, exit } = await ctrlCWithRequestsInFlight(app)
  for (const result of results) {
    assert.strictEqual(result.error, undefined, JSON.stringify(results) + '\n' + app.cli.output)
    assert.strictEqual(result.status, 200)
    assert.match(result.body, /^started \d+\ndone\n$/)
  }
  assert.deepStrictEqual(exit, { code: 0, signal: null }, app.cli.output)
  assert.match(app.cli.output, /shutdown complete/)
  assert.doesNotMatch(app.cli.output, /before it finished draining/)
})

test('an app that exits at once on SIGINT cuts its requests, and the log does not call that a clean shutdown', async () => {
  const app = await startApp('at-once', { CZ_EXIT_AT_ONCE: '1' })
  const { results } = await ctrlCWithRequestsInFlight(app)
  assert.ok(results.some((result) => result.error !== undefined || !/done/.test(result.body)), 'requests were cut: ' + JSON.stringify(results))
  const output = app.cli.output
  assert.match(output, /worker \d exited \(shutdown\) with code 0 before it finished draining: the app ended its own process/)
  assert.match(output, /server\.close\(\(\) => process\.exit\(0\)\)/)
  assert.doesNotMatch(output, /worker \d exited \(shutdown\)(?! with code)/, 'no clean exit line for a worker that cut requests')
  assert.doesNotMatch(output, /shutdown complete/)
  assert.match(output, /shutdown done, not clean/)
})
