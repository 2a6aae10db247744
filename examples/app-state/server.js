'use strict'

const { clusterize } = require('../../')
// The probes server's /metrics sums the app's prom-client metrics over the workers.
clusterize(() => require('./app')(), {
  probes: { port: Number(process.env.PROBES_PORT) || 9090, host: '127.0.0.1' }
})
