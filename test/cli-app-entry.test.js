'use strict'

/**
 * What the CLI does with the app files people already have: the entry-point
 * idioms `if (!module.parent) app.listen()` and `require.main === module`
 * work unchanged (the workers serve, the app's own listen never runs), and an
 * app with a syntax error is reported with its file, line and source, as Node
 * reports it.
 */

const { describe, test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { runCli, startCli, httpGet: get, cliScratch } = require('./helpers/cli')
const { formatBanner } = require('../lib/cli/banner')

const { tmp, tracked } = cliScratch('entry')
const EXPRESS = JSON.stringify(require.resolve('express'))

/** An Express app that answers with its pid, started by `guard` when run as `node app.js`. */
function appWithGuard (guard) {
  return `const express = require(${EXPRESS})
const app = express()
app.get('/', (req, res) => res.json({ pid: process.pid }))
${guard} {
  app.listen(process.env.PORT || 3000, () => console.log('the app listened on its own'))
}
module.exports = app
`
}

describe('entry-point idioms run unchanged', () => {
  for (const [name, guard] of [['module-parent.js', 'if (!module.parent)'], ['require-main.js', 'if (require.main === module)']]) {
    test(`${guard} app.listen(): served by both workers, the app's own listen never runs`, async () => {
      fs.writeFileSync(path.join(tmp, name), appWithGuard(guard))
      const port = await freePort()
      const pidFile = path.join(tmp, name + '.pid')
      const cli = await startCli([name, '--workers', '2', '--port', String(port), '--host', '127.0.0.1', '--pid-file', pidFile], { cwd: tmp, pidFile, tracked })
      try {
        const pids = new Set()
        await eventually(async () => {
          const res = await get(port)
          assert.strictEqual(res.status, 200, res.body)
          pids.add(res.json.pid)
          return pids.size === 2
        }, { timeoutMs: 30000, intervalMs: 20, what: () => 'answers from both workers\n' + cli.output })
        assert.doesNotMatch(cli.output, /the app listened on its own/)
        // The workers said at ready that they made no session() middleware: no 'not reported yet'.
        assert.match(cli.output, /sessions +none \(the app uses no session\(\) middleware\)/, cli.output)
        assert.doesNotMatch(cli.output, /calls app\.listen\(\)|listen\(\) itself/i)
      } finally {
        cli.child.kill('SIGTERM')
        const { code } = await cli.exited
        assert.strictEqual(code, 0, cli.output)
      }
    })
  }
})

describe('an app that cannot start', () => {
  test('a syntax error is reported with its file, line and source line, and the start fails', async () => {
    fs.writeFileSync(path.join(tmp, 'broken.js'), "const express = require('express')\nconst app = express(\nmodule.exports = app\n")
    const result = await runCli(['broken.js', '--workers', '1', '--port', String(await freePort()), '--pid-file', path.join(tmp, 'broken.pid')], { cwd: tmp })
    assert.notStrictEqual(result.code, 0)
    const output = result.stdout + result.stderr
    assert.match(output, /missing \) after argument list at .*broken\.js:3/, output)
    assert.match(output, /\n +module\.exports = app\n +\^+/, output)
  })

  test('a factory that throws with two workers: the start fails with exit 1, and the last line says code=1', async () => {
    fs.writeFileSync(path.join(tmp, 'factory-throws.js'), "module.exports = async () => { throw new Error('factory boom') }\n")
    const result = await runCli(['factory-throws.js', '--workers', '2', '--port', String(await freePort()), '--pid-file', path.join(tmp, 'factory-throws.pid')], { cwd: tmp })
    assert.strictEqual(result.code, 1, result.stdout + result.stderr)
    const lines = (result.stdout + result.stderr).trim().split('\n').filter((line) => line.startsWith('[clusterize]'))
    assert.match(lines[lines.length - 1], /shutdown complete code=1$/, lines.join('\n'))
  })

  test('a syntax error in a file the app requires names that file', async () => {
    fs.writeFileSync(path.join(tmp, 'helper.js'), 'module.exports = {\n  a: 1\n  b: 2\n}\n')
    fs.writeFileSync(path.join(tmp, 'uses-helper.js'), "require('./helper')\nmodule.exports = (req, res) => res.end('ok')\n")
    const result = await runCli(['uses-helper.js', '--workers', '1', '--port', String(await freePort()), '--pid-file', path.join(tmp, 'uses-helper.pid')], { cwd: tmp })
    assert.notStrictEqual(result.code, 0)
    const output = result.stdout + result.stderr
    assert.match(output, /cannot load .*uses-helper\.js: .* at .*helper\.js:3/, output)
  })
})

describe('the banner', () => {
  const worker = { id: 0, pid: 101, generation: 1, state: 'ready', uptimeMs: 10, restarts: 0 }

  test('the probes line names /dashboard where it is served, and not where it is off', () => {
    const stats = { pid: 100, port: 3000, scheduling: 'rr', workers: [worker] }
    assert.match(formatBanner(stats, { probesPort: 9090 }), /probes +http:\/\/127\.0\.0\.1:9090 \(\/live \/ready \/stats \/metrics \/dashboard\)/)
    assert.match(formatBanner(stats, { probesPort: 9090, dashboard: false }), /\(\/live \/ready \/stats \/metrics\)/)
  })

  test("a worker that reported no session() at ready is 'none', one that reported nothing yet is 'not reported yet'", () => {
    const none = formatBanner({ pid: 100, port: 3000, scheduling: 'rr', workers: [Object.assign({ session: null }, worker)] })
    assert.match(none, /sessions +none \(the app uses no session\(\) middleware\)/)
    const unknown = formatBanner({ pid: 100, port: 3000, scheduling: 'rr', workers: [worker] })
    assert.match(unknown, /sessions +not reported yet/)
  })
})
