'use strict'

/**
 * The CLI primary's control socket: a unix socket next to the pid file
 * (`<pid file>.sock`, mode 0600, so only the user who started the primary
 * can use it) answering one line of JSON per request:
 *
 *   {"cmd":"reload"}  -> {"ok":true,"result":{ ok, rolledBack, reason, replaced, durationMs, generation }}
 *   {"cmd":"upgrade","node"?:"/path/to/node","args"?:["--workers","4"]}
 *                     -> {"ok":true,"result":{ ok, reason?, pid, previousPid, node, durationMs }}
 *   {"cmd":"scale","count":N} or {"cmd":"scale","delta":+-N}
 *                     -> {"ok":true,"result":{ ok, from, to, ready, reason, durationMs }}
 *   {"cmd":"status"}  -> {"ok":true,"result": stats()}
 *   {"cmd":"stop"}    -> {"ok":true} then a graceful shutdown
 *
 * `clusterize reload` uses it to report the reload's own result without a
 * probes server; without the socket it falls back to the reload signal.
 */

const fs = require('fs')
const net = require('net')
const path = require('path')
const debug = require('debug')('clusterize:cli')
const { descriptorOf } = require('../primary/inherit')

/** Longest unix socket path Linux and macOS accept. */
const MAX_SOCKET_PATH = 103

/**
 * @param {string} socketPath
 * @param {{ reload: () => Promise<object>, upgrade?: (options: object) => Promise<object>, scale?: (count: number) => Promise<object>, stats: () => object, shutdown: () => Promise<{ code: number }> }} handle
 * @param {{ fd?: number }} [options] `fd`: the socket, inherited from the primary this one replaces (`clusterize upgrade`)
 * @returns {Promise<{ path: string, close: () => void, release: () => void, descriptor: () => number|null }|null>}
 *   null when the path is too long for a socket. release() stops answering
 *   but leaves the socket file to the primary that inherited it.
 */
async function startControlServer (socketPath, handle, options) {
  const fd = options && options.fd !== undefined && options.fd !== null ? options.fd : undefined
  if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH || Buffer.byteLength(path.join(path.dirname(socketPath), `.${process.pid}.bind.sock`)) > MAX_SOCKET_PATH) {
    debug('no control socket: %s is longer than %d bytes', socketPath, MAX_SOCKET_PATH)
    return null
  }
  // An inherited socket is already bound at that path, and the old primary still answers on it.
  if (fd === undefined) await removeStaleSocket(socketPath)
  // allowHalfOpen: a client may shut down its sending side right after the
  // command (socat, nc -N); the answer must still reach it, however long a
  // reload takes. The connection ends after the one answer.
  const server = net.createServer({ allowHalfOpen: true }, function onControlConnection (socket) {
    let buffer = ''
    let answering = false
    socket.setEncoding('utf8')
    socket.on('error', (err) => debug('control client error: %s', err.message))
    socket.on('end', () => {
      if (!answering) socket.end()
    })
    socket.on('data', (chunk) => {
      if (answering) return // one command per connection
      buffer += chunk
      if (buffer.length > 4096) return socket.destroy()
      const end = buffer.indexOf('\n')
      if (end === -1) return
      const line = buffer.slice(0, end)
      buffer = ''
      answering = true
      answer(line).then((reply) => {
        socket.end(JSON.stringify(reply) + '\n')
      })
    })
  })
  server.on('error', (err) => debug('control socket error: %s', err.message))

  async function answer (line) {
    let request
    try {
      request = JSON.parse(line)
    } catch {
      return { ok: false, error: 'send one line of JSON such as {"cmd":"reload"}' }
    }
    try {
      switch (request && request.cmd) {
        case 'reload': return { ok: true, result: await handle.reload() }
        case 'upgrade': {
          const bad = upgradeRequestProblem(request)
          if (bad) return { ok: false, error: bad }
          return { ok: true, result: await handle.upgrade({ node: request.node, args: request.args }) }
        }
        case 'scale': {
          if (typeof handle.scale !== 'function') return { ok: false, error: 'scale needs workers: this primary runs in single-process mode (--workers 0); restart it with --workers N' }
          const count = scaleTarget(request, handle.stats())
          if (typeof count === 'string') return { ok: false, error: count }
          return { ok: true, result: await handle.scale(count) }
        }
        case 'status': return { ok: true, result: handle.stats() }
        case 'stop':
          setImmediate(() => handle.shutdown().then((result) => process.exit(result.code)))
          return { ok: true }
        default: return { ok: false, error: 'unknown cmd: use reload, upgrade, scale, status or stop' }
      }
    } catch (err) {
      return { ok: false, error: err.message }
    }
  }

  if (fd !== undefined) {
    await listenOn(server, { fd })
  } else {
    // Bound under a temporary name, then renamed: libuv unlinks the path a
    // socket was bound to when it closes, and after an upgrade that path is
    // the new primary's. The file is created by listen() with the umask
    // set: no moment where others could open it.
    const bindPath = path.join(path.dirname(socketPath), `.${process.pid}.bind.sock`)
    const umask = process.umask(0o177)
    try {
      await listenOn(server, bindPath)
    } finally {
      process.umask(umask)
    }
    fs.chmodSync(bindPath, 0o600)
    fs.renameSync(bindPath, socketPath)
  }
  let owned = true
  return {
    path: socketPath,
    descriptor: () => descriptorOf(server._handle),
    release () {
      owned = false
      server.close()
    },
    close () {
      server.close()
      if (!owned) return
      try { fs.unlinkSync(socketPath) } catch {}
    }
  }
}

function listenOn (server, where) {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(where, () => {
      server.removeListener('error', reject)
      resolve()
    })
  })
}

/** The control socket is its owner's only, but what it starts must still be a plain request. */
function upgradeRequestProblem (request) {
  if (request.node !== undefined && (typeof request.node !== 'string' || request.node === '')) return 'upgrade: "node" must be the path of a node binary'
  if (request.args !== undefined && (!Array.isArray(request.args) || request.args.some((arg) => typeof arg !== 'string') || request.args.length > 64)) {
    return 'upgrade: "args" must be an array of start flags (strings)'
  }
  return null
}

/**
 * The worker count a scale request asks for: `count`, or `delta` added to the current count.
 * @returns {number|string} the count, or what is wrong with the request
 */
function scaleTarget (request, stats) {
  if (request.count !== undefined && request.delta === undefined) return request.count
  if (request.delta !== undefined && request.count === undefined && Number.isInteger(request.delta)) {
    return stats.scaling.workers + request.delta
  }
  return 'scale: send either "count" (the number of workers) or "delta" (an integer to add, negative to retire)'
}

/**
 * A socket file left by a primary that died: nothing answers on it, so it
 * goes. Anything else at that path (a regular file, a directory) is someone's
 * data and is never deleted.
 */
function removeStaleSocket (socketPath) {
  let stat
  try {
    stat = fs.lstatSync(socketPath)
  } catch (err) {
    return err.code === 'ENOENT' ? Promise.resolve() : Promise.reject(err)
  }
  if (!stat.isSocket()) {
    return Promise.reject(new Error(`${socketPath} exists and is not a socket; move it away, or choose another --pid-file`))
  }
  return new Promise((resolve, reject) => {
    const probe = net.connect(socketPath)
    probe.once('connect', () => {
      probe.destroy()
      reject(new Error(`another process answers on ${socketPath}: is clusterize already running with this pid file?`))
    })
    probe.once('error', () => {
      try { fs.unlinkSync(socketPath) } catch {}
      resolve()
    })
  })
}

/**
 * Send one command to a control socket.
 * @param {string} socketPath
 * @param {object} request
 * @param {number} timeoutMs
 * @returns {Promise<object>} the reply
 */
function sendControl (socketPath, request, timeoutMs) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath)
    let buffer = ''
    const timer = setTimeout(() => socket.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs)
    socket.setEncoding('utf8')
    socket.once('connect', () => socket.write(JSON.stringify(request) + '\n'))
    socket.on('data', (chunk) => { buffer += chunk })
    let connected = false
    socket.once('connect', () => { connected = true })
    socket.once('end', () => {
      clearTimeout(timer)
      // Closed before a whole answer: the primary exited (or was killed) while answering.
      if (buffer.trim() === '' || !buffer.endsWith('\n')) return reject(noAnswer())
      try {
        resolve(JSON.parse(buffer))
      } catch {
        reject(new Error('the control socket answered something that is not JSON'))
      }
    })
    socket.once('error', (err) => {
      clearTimeout(timer)
      reject(connected && (err.code === 'ECONNRESET' || err.code === 'EPIPE') ? noAnswer() : err)
    })
  })
}

/** The connection closed before the answer: see ERR_CLUSTERIZE_CLI_NO_ANSWER in lib/cli/control.js. */
function noAnswer () {
  return Object.assign(new Error('the control socket closed without an answer'), { code: 'ERR_CLUSTERIZE_CLI_NO_ANSWER' })
}

module.exports = { startControlServer, sendControl }
