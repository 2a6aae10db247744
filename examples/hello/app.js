'use strict'

// An ordinary Express app: it knows nothing about clusterize.
const express = require('express')

module.exports = function createApp () {
  const app = express()
  app.get('/', (req, res) => {
    res.json({ hello: 'world', pid: process.pid, worker: process.env.CLUSTERIZE_WORKER_ID })
  })
  return app
}
