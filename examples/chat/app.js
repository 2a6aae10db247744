'use strict'

// A chat on every core: Express + socket.io + shared sessions. The user who
// logged in over HTTP is known to socket.io on whichever worker serves the
// socket (sessions live in the cluster store, or Redis with REDIS_URL), and
// messages reach every client on every worker through clusterize's adapter.
const http = require('http')
const express = require('express')
const { Server } = require('socket.io')
const { session, onDrain } = require('../../')
const { createAdapter } = require('../../socket.io')

module.exports = function createApp () {
  const app = express()
  const sessions = session({
    secret: process.env.SESSION_SECRET || 'dev-only-secret-change-me-0123456789',
    cookie: { maxAge: 60 * 60 * 1000 }
  })
  app.use(express.urlencoded({ extended: false }))
  app.use(sessions)

  app.post('/login', (req, res, next) => {
    const user = String(req.body.user || '').trim().slice(0, 40)
    if (!user) return res.status(400).json({ error: 'user is required' })
    req.session.regenerate((err) => {
      if (err) return next(err)
      req.session.user = user
      req.session.save((err) => (err ? next(err) : res.json({ user, pid: process.pid })))
    })
  })

  app.get('/', (req, res) => {
    res.type('html').send(`<!doctype html><meta charset="utf-8"><title>chat</title>
<p>worker pid ${process.pid}${req.session.user ? `, logged in as <b>${escapeHtml(req.session.user)}</b>` : ''}</p>
<form method="post" action="/login"><input name="user" placeholder="name"><button>Log in</button></form>
<ul id="log"></ul><form id="say"><input id="text" autocomplete="off"><button>Send</button></form>
<script src="/socket.io/socket.io.js"></script>
<script>
  const socket = io()
  const log = (text) => { const li = document.createElement('li'); li.textContent = text; document.getElementById('log').append(li) }
  socket.on('chat', (m) => log(m.user + ': ' + m.text + '  (worker ' + m.worker + ')'))
  socket.on('server-restarting', () => log('(server restarting, reconnecting...)'))
  document.getElementById('say').onsubmit = (e) => { e.preventDefault(); socket.emit('chat', document.getElementById('text').value); document.getElementById('text').value = '' }
</script>`)
  })

  const server = http.createServer(app)
  const io = new Server(server, { adapter: createAdapter() })
  // The HTTP session, read by socket.io's handshake: the same user on every worker.
  io.engine.use(sessions)
  io.on('connection', (socket) => {
    const user = socket.request.session && socket.request.session.user
    if (!user) return socket.disconnect(true)
    socket.emit('welcome', { user, worker: process.pid })
    socket.on('chat', (text, ack) => {
      io.emit('chat', { user, text: String(text).slice(0, 500), worker: process.pid })
      if (typeof ack === 'function') ack()
    })
  })
  // A reload closes each socket with 1012 once the new worker is ready; say so first.
  onDrain(() => { io.emit('server-restarting') })
  return server
}

function escapeHtml (text) {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]))
}
