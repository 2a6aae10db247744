'use strict'

/**
 * `clusterize top` in a real pseudo-terminal (tmux): it shows the workers of
 * a running CLI cluster, updates, and exits with code 0 on `q`.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawn, execFileSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')

const BIN = path.join(__dirname, '..', 'bin', 'clusterize.js')
const APP = path.join(__dirname, '..', 'examples', 'hello', 'app.js')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'clusterize-top-'))
const session = `cz-top-${process.pid}`
let primary = null

after(() => {
  try { execFileSync('tmux', ['kill-session', '-t', session], { stdio: 'ignore' }) } catch {}
  if (primary && primary.exitCode === null) primary.kill('SIGKILL')
  fs.rmSync(tmp, { recursive: true, force: true })
})

function capture () {
  try {
    return execFileSync('tmux', ['capture-pane', '-p', '-t', session], { encoding: 'utf8' })
  } catch {
    return ''
  }
}

test('clusterize top shows the workers live and quits on q', async () => {
  const pidFile = path.join(tmp, 'app.pid')
  const port = await freePort()
  primary = spawn(process.execPath, [BIN, APP, '--workers', '2', '--port', String(port), '--host', '127.0.0.1', '--pid-file', pidFile], {
    cwd: tmp, env: Object.assign({}, process.env, { WORKERS: '', PORT: '', NO_COLOR: '1' }), stdio: 'ignore'
  })
  await eventually(() => fs.existsSync(pidFile), { timeoutMs: 30000, what: 'the pid file' })

  const command = `${process.execPath} ${BIN} top --pid-file ${pidFile}; echo TOP-EXIT=$?; sleep 30`
  execFileSync('tmux', ['new-session', '-d', '-s', session, '-x', '150', '-y', '40', command])
  const screen = await eventually(() => {
    const text = capture()
    return /clusterize top/.test(text) && (text.match(/^\d+ +\d+ +1 ready /gm) || []).length === 2 && text
  }, { timeoutMs: 20000, what: () => 'two ready workers on the screen:\n' + capture() })
  assert.match(screen, /generation 1/)
  assert.match(screen, /recent events:/)

  execFileSync('tmux', ['send-keys', '-t', session, 'q'])
  const after = await eventually(() => /TOP-EXIT=(\d+)/.exec(capture()), { timeoutMs: 10000, what: () => 'top to exit:\n' + capture() })
  assert.strictEqual(after[1], '0')

  primary.kill('SIGTERM')
  await new Promise((resolve) => primary.once('exit', resolve))
})
