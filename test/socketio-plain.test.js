'use strict'

/**
 * createAdapter() in a process clusterize does not run (a plain
 * `node app.js` in development, a test): socket.io's in-memory adapter
 * serves instead, with one debug line; `strict: true` refuses with
 * ERR_CLUSTERIZE_BUS_NOT_STARTED. Each case runs in its own plain Node
 * process, so no bus can have been started by another test.
 */

const { test } = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { execFile } = require('child_process')

const root = path.join(__dirname, '..')

/** Run `body` (an async function's body) in a plain Node process; resolves with its JSON output and stderr. */
function runPlain (body, env) {
  const script = `
    const http = require('http')
    const { Server } = require('socket.io')
    const { io: connect } = require('socket.io-client')
    const { createAdapter } = require('clusterize-express/socket.io')
    ;(async () => { ${body} })().then((result) => { process.stdout.write(JSON.stringify(result)); process.exit(0) },
      (err) => { process.stdout.write(JSON.stringify({ thrown: { code: err.code, message: err.message } })); process.exit(0) })
  `
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['-e', script], { cwd: root, timeout: 20000, env: Object.assign({}, process.env, { DEBUG: 'clusterize:socket.io' }, env) }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${err.message}\n${stderr}`))
      resolve({ result: JSON.parse(stdout), stderr })
    })
  })
}

test('outside clusterize, createAdapter() behaves as socket.io\'s in-memory adapter (emit, rooms, fetchSockets, two namespaces) and says so in one debug line', async () => {
  const { result, stderr } = await runPlain(`
    const server = http.createServer()
    const io = new Server(server, { adapter: createAdapter() })
    io.of('/other')
    io.on('connection', (socket) => socket.join('room'))
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    const client = connect('http://127.0.0.1:' + server.address().port, { transports: ['websocket'], reconnection: false })
    await new Promise((resolve, reject) => { client.once('connect', resolve); client.once('connect_error', reject) })
    const got = new Promise((resolve) => client.once('hello', resolve))
    io.to('room').emit('hello', 'room-emit')
    const hello = await got
    const ids = (await io.fetchSockets()).map((s) => s.id)
    const id = client.id
    client.disconnect()
    io.close()
    return { hello, fetched: ids.length === 1 && ids[0] === id, adapter: io.of('/').adapter.constructor.name }
  `)
  assert.deepStrictEqual(result, { hello: 'room-emit', fetched: true, adapter: 'Adapter' })
  const lines = stderr.split('\n').filter((line) => /in-memory adapter serves instead/.test(line))
  assert.strictEqual(lines.length, 1, stderr)
})

test('outside clusterize, with connectionStateRecovery, the fallback is socket.io\'s session-aware adapter', async () => {
  const { result } = await runPlain(`
    const io = new Server({ connectionStateRecovery: {}, adapter: createAdapter() })
    return { adapter: io.of('/').adapter.constructor.name }
  `)
  assert.deepStrictEqual(result, { adapter: 'SessionAwareAdapter' })
})

test('outside clusterize, createAdapter({ strict: true }) throws ERR_CLUSTERIZE_BUS_NOT_STARTED from new Server()', async () => {
  const { result } = await runPlain(`
    new Server({ adapter: createAdapter({ strict: true }) })
    return { thrown: null }
  `)
  assert.strictEqual(result.thrown.code, 'ERR_CLUSTERIZE_BUS_NOT_STARTED')
  assert.match(result.thrown.message, /strict: true/)
})

test('in a clusterize worker whose bus has not started (Server built at require time), createAdapter() still refuses, saying where to build the Server', async () => {
  const { result } = await runPlain(`
    new Server({ adapter: createAdapter() })
    return { thrown: null }
  `, { CLUSTERIZE_WORKER_ID: '0' })
  assert.strictEqual(result.thrown.code, 'ERR_CLUSTERIZE_BUS_NOT_STARTED')
  assert.match(result.thrown.message, /inside the app factory/)
})

test('bad input: createAdapter({ strict }) takes a boolean', () => {
  const { createAdapter } = require('clusterize-express/socket.io')
  assert.throws(() => createAdapter({ strict: 'yes' }), /createAdapter\(\{ strict \}\) must be true or false, got yes/)
})
