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

test('clusterize top strips control characters and escape sequences from worker text', async () => {
  const http = require('http')
  const { EventEmitter } = require('events')
  const { top } = require('../lib/cli/top')
  const hostile = 'boom \x1b]2;owned title\x07 at boot \x1b[2J\x1b[31mred\x1b[0m \x9b1;1H \u202Eevil\x1bP1$qpayload\x1b\\ end\r\nnext'
  const t = Date.now()
  const snapshot = { t, scheduling: 'rr\x1b[5m', generation: 1, reloads: 0, crashLooping: true, shuttingDown: false, workers: [{ id: 0, pid: 4242, generation: 1, state: 'ready\x1b]0;x\x07', served: 1 }] }
  const frames = [
    ['hello', { controls: false, intervalMs: 1000, events: [{ t, type: 'crashloop', generation: 1, crashes: 5, lastError: hostile }], snapshots: [] }],
    ['lifecycle', { t, type: 'worker-exit', id: 0, pid: 4242, generation: 1, reason: hostile }],
    ['snapshot', snapshot]
  ]
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/event-stream' })
    res.end(frames.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join(''))
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  let output = ''
  const stdin = Object.assign(new EventEmitter(), { resume () {}, pause () {} })
  const io = { stdout: { write: (text) => { output += text } }, stderr: { write () {} }, env: {}, stdin }
  const code = await top({ probesPort: server.address().port }, io)
  server.close()
  assert.strictEqual(code, 0)
  assert.match(output, /crash loop \(generation 1\): boom +at boot +red +evil +end +next/)
  assert.match(output, /worker 0 exited: boom +at boot/)
  // top's own sequences (hide cursor, home, clear, show cursor) are the only ones left.
  const rest = output.replace(/\x1b\[\?25[lh]|\x1b\[H|\x1b\[2J/g, '')
  assert.doesNotMatch(rest, /[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]/, JSON.stringify(rest))
  assert.doesNotMatch(rest, /owned title|payload|\]0;x/)
})
