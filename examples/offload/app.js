'use strict'

// A CPU-heavy route (password hashing) offloaded to threads, next to a /health
// route that stays fast while /hash is saturated.
const express = require('express')
const offload = require('../../middleware/offload')

/**
 * Build the example app.
 * @param {object} [options] offload() options
 * @returns {import('express').Express}
 */
module.exports = function createApp (options) {
  const app = express()
  app.use(offload(options))

  // inline task: self-contained, gets its inputs as arguments, may require()
  app.get('/hash', async (req, res) => {
    const password = String(req.query.password || 'hunter2')
    const hash = await req.offload((pw) => {
      const crypto = require('node:crypto')
      return crypto.pbkdf2Sync(pw, 'clusterize-salt', 100000, 32, 'sha256').toString('hex')
    }, password)
    res.json({ hash })
  })

  // the same work as a ready-made route: result sent as JSON, errors as JSON
  app.get('/hash2', offload.route((pw) => {
    const crypto = require('node:crypto')
    return { hash: crypto.pbkdf2Sync(pw, 'clusterize-salt', 100000, 32, 'sha256').toString('hex') }
  }, (req) => String(req.query.password || 'hunter2')))

  app.get('/health', (req, res) => {
    res.json({ ok: true })
  })

  // offload errors (503 + Retry-After when the queue is full, timeouts, task errors) as JSON
  app.use(offload.errorHandler())
  return app
}
