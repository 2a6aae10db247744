'use strict'

// Kubernetes-friendly: probes on their own port, SIGTERM drains in-flight
// requests, and the shutdown deadline fits inside terminationGracePeriodSeconds.
const { clusterize } = require('../../')

clusterize(() => require('./app')(), {
  probes: { port: Number(process.env.PROBES_PORT) || 9090, host: process.env.PROBES_HOST || '127.0.0.1' },
  shutdown: { timeoutMs: 25000 }
})
