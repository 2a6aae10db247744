'use strict'

// State that breaks under a cluster, done right: a rate limit that holds for every worker,
// a node-cron task that fires once per tick cluster-wide, a poller that runs on one worker, and
// prom-client metrics that the primary's /metrics sums over the workers.
const express = require('express')
const cron = require('node-cron')
const promClient = require('prom-client')
const { rateLimit } = require('express-rate-limit')
const { ClusterStore } = require('../../rate-limit')
const { singleton } = require('../../')

module.exports = function createApp () {
  const app = express()
  const runs = { cron: [], poller: null }
  // Registered as in any app: the default registry, in every worker.
  const served = new promClient.Counter({ name: 'app_requests_total', help: 'Requests served', labelNames: ['route'] })
  app.use((req, res, next) => {
    served.inc({ route: req.path })
    next()
  })

  cron.schedule('*/2 * * * * *', (context) => {
    runs.cron.push({ at: context.date.toISOString(), pid: process.pid })
    if (runs.cron.length > 20) runs.cron.shift()
  }, { name: 'every-two-seconds', distributed: true })

  singleton('poller', (signal, token) => {
    runs.poller = { pid: process.pid, token, since: new Date().toISOString() }
    const timer = setInterval(() => { runs.poller.lastTick = new Date().toISOString() }, 1000)
    signal.addEventListener('abort', () => {
      clearInterval(timer)
      runs.poller = null
    })
  })

  app.use('/limited', rateLimit({ windowMs: 60000, limit: 5, standardHeaders: 'draft-8', legacyHeaders: false, store: new ClusterStore({ prefix: 'limited:' }) }))
  app.get('/limited', (req, res) => res.json({ ok: true, pid: process.pid }))
  app.get('/runs', (req, res) => res.json({ pid: process.pid, cronHere: runs.cron, pollerHere: runs.poller }))
  return app
}
