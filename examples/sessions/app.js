'use strict'

// Login / profile / logout that works across workers.
// Sessions go to Redis when REDIS_URL is set, else to the cluster store held by the primary.
const express = require('express')
const { session } = require('../../')

module.exports = function createApp () {
  const app = express()
  // Behind a TLS-terminating proxy (nginx, a load balancer) this lets `secure`
  // cookies work in production: req.secure comes from X-Forwarded-Proto.
  app.set('trust proxy', 1)
  app.use(express.urlencoded({ extended: false }))
  app.use(session({
    // Every worker must sign with the same secret: set SESSION_SECRET (>= 32 chars in production).
    secret: process.env.SESSION_SECRET || 'dev-only-secret-change-me-0123456789',
    cookie: { maxAge: 60 * 60 * 1000 }
  }))

  app.get('/', (req, res) => {
    res.type('html').send(`<p>worker pid ${process.pid}</p>
      <form method="post" action="/login"><input name="user" placeholder="name"><button>Log in</button></form>
      <p><a href="/profile">profile</a></p>
      <form method="post" action="/logout"><button>Log out</button></form>`)
  })

  app.post('/login', (req, res, next) => {
    const user = String(req.body.user || '').trim()
    if (!user) return res.status(400).json({ error: 'user is required' })
    // A new session id on login: an id planted before login (session fixation) is worthless after it.
    req.session.regenerate((err) => {
      if (err) return next(err)
      req.session.user = { name: user, loggedInAt: new Date().toISOString() }
      req.session.save((err) => (err ? next(err) : res.redirect(303, '/profile')))
    })
  })

  app.get('/profile', (req, res) => {
    if (!req.session.user) return res.status(401).json({ error: 'not logged in', pid: process.pid })
    req.session.views = (req.session.views || 0) + 1
    res.json({ user: req.session.user, views: req.session.views, pid: process.pid })
  })

  app.post('/logout', (req, res, next) => {
    req.session.destroy((err) => {
      if (err) return next(err)
      res.clearCookie('connect.sid')
      res.json({ loggedOut: true })
    })
  })

  return app
}
