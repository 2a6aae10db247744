'use strict'

/**
 * The app the history checker drives (createApp for ./primary.js). Its
 * options come from CZ_HISTORY (JSON, see ./primary.js); every route
 * answers JSON with the worker's pid and its primary's.
 *
 *   GET /whoami              -> { pid, primary }
 *   GET /incr                the session's counter + 1 (read-modify-write) -> { value }
 *   GET /read                the session's counter -> { value }
 *   GET /hit                 rate limited by the x-history-key header: 200 or 429
 *   GET /block-primary?ms=N  an app's bus.handle handler in the primary busy-waits N ms
 *   GET /bus-send?count=N    broadcast the next N numbers of this worker's sequence
 *
 * With `socketio`, the app is served with socket.io (clusterize's adapter,
 * connectionStateRecovery): a socket's 'send' (sender, seq, ack) emits
 * { sender, seq } to every socket, then acks.
 *
 * With `singleton`, every worker runs singleton('history-job'): the holder
 * writes { token, pid } to the collector (a fenced downstream in the test
 * process) every 25 ms, each write awaited, until its signal aborts. With
 * `bus`, every worker reports what it receives on 'history:seq' to the
 * collector, in the order received.
 */

const http = require('http')
const express = require('express')

const options = JSON.parse(process.env.CZ_HISTORY || '{}')

/** POST a JSON body to the collector; resolves true once it answered, false on any error. */
function toCollector (urlPath, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: options.collector, path: urlPath, method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode === 200))
    })
    req.on('error', () => resolve(false))
    req.setTimeout(5000, () => req.destroy())
    req.end(JSON.stringify(body))
  })
}

function runSingleton () {
  const { singleton } = require('../..')
  singleton('history-job', function fencedWrites (signal, token) {
    return (async function writeWhileHolding () {
      while (!signal.aborted) {
        await toCollector('/write', { token, pid: process.pid })
        await new Promise((resolve) => setTimeout(resolve, 25))
      }
    })()
  }, { leaseMs: options.singletonLeaseMs || 2000 })
}

/** Forward what this worker receives, in order, one batch at a time. */
function reportBusMessages () {
  const { bus } = require('../..')
  const pending = []
  let sending = false
  bus.on('history:seq', function received (data) {
    pending.push([data.sender, data.seq])
    if (!sending) flush()
  })
  async function flush () {
    sending = true
    while (pending.length) {
      const batch = pending.splice(0, pending.length)
      while (!(await toCollector('/received', { receiver: process.pid, messages: batch }))) {
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
    }
    sending = false
  }
}

let nextSeq = 1

module.exports = function createApp () {
  const { session, bus } = require('../..')
  const app = express()
  const who = () => ({ pid: process.pid, primary: process.ppid })
  app.get('/whoami', (req, res) => res.json(who()))
  app.get('/block-primary', function blockPrimary (req, res, next) {
    bus.request('history:block', Number(req.query.ms), { timeoutMs: 60000 }).then(() => res.json(who()), next)
  })
  if (options.bus) {
    reportBusMessages()
    app.get('/bus-send', async function busSend (req, res) {
      const count = Number(req.query.count)
      let sent = 0
      while (sent < count) {
        try {
          bus.broadcast('history:seq', { sender: process.pid, seq: nextSeq })
          nextSeq++
          sent++
        } catch (err) {
          if (err.code !== 'ERR_CLUSTERIZE_BUS_BACKPRESSURE') throw err
          await bus.drained()
        }
      }
      res.json(Object.assign({ sent, last: nextSeq - 1 }, who()))
    })
  }
  if (options.rateLimit) {
    const { rateLimit } = require('express-rate-limit')
    const { ClusterStore } = require('../../rate-limit')
    app.get('/hit', rateLimit({
      windowMs: options.rateLimit.windowMs,
      limit: options.rateLimit.limit,
      keyGenerator: (req) => String(req.get('x-history-key')),
      store: new ClusterStore({ prefix: 'history:' }),
      validate: false
    }), (req, res) => res.json(who()))
  }
  if (options.sessionStore) {
    const store = options.sessionStore === 'redis' ? { store: 'redis', redis: options.redisUrl, prefix: options.redisPrefix } : { store: 'cluster' }
    app.use(session(Object.assign({ secret: 'history-checker-secret-0123456789abcdef', resave: false, saveUninitialized: false }, store)))
    app.get('/incr', function incr (req, res) {
      req.session.n = (req.session.n || 0) + 1
      res.json(Object.assign({ value: req.session.n }, who()))
    })
    app.get('/read', function read (req, res) {
      if (req.session.n === undefined) return res.status(404).json(Object.assign({ error: 'no such session' }, who()))
      res.json(Object.assign({ value: req.session.n }, who()))
    })
  }
  if (options.singleton) runSingleton()
  return options.socketio ? withSocketIo(app) : app
}

function withSocketIo (app) {
  const { Server } = require('socket.io')
  const { createAdapter } = require('../../socket.io')
  const server = http.createServer(app)
  const io = new Server(server, {
    transports: ['websocket'],
    adapter: createAdapter(),
    connectionStateRecovery: { maxDisconnectionDuration: 60000 }
  })
  io.on('connection', function connected (socket) {
    socket.on('send', function send (sender, seq, ack) {
      io.emit('msg', { sender, seq })
      if (typeof ack === 'function') ack()
    })
  })
  return server
}
