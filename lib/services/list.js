'use strict'

/**
 * The services the primary (and the single process with `workers: 0`)
 * starts: one list, in the order they start. A service costs nothing until a
 * worker uses it. Each entry is `{ name, start(context) }` (see ./host.js).
 */

const SERVICES = [
  require('../session/cluster-service').sessionService,
  require('../realtime/recovery-service').recoveryService,
  // App state (lib/state): the app's prom-client metrics, rate-limit counts, singleton leases, node-cron run claims.
  require('../state/metrics').metricsService,
  require('../state/rate-limit-service').rateLimitService,
  require('../state/singleton-service').singletonService,
  require('../state/cron-service').cronService
]

module.exports = { SERVICES }
