'use strict'

// An Express app with a slow endpoint, to watch a SIGTERM drain it.
const express = require('express')

module.exports = function createApp () {
  const app = express()
  app.get('/', (req, res) => res.json({ pid: process.pid, worker: process.env.CLUSTERIZE_WORKER_ID }))
  app.get('/slow', (req, res) => {
    setTimeout(() => res.json({ pid: process.pid, finished: true }), 2000)
  })
  return app
}
