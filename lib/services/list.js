'use strict'

/**
 * The services the primary (and the single process with `workers: 0`)
 * starts: one list, in the order they start. A service costs nothing until a
 * worker uses it. Each entry is `{ name, start(context) }` (see ./host.js).
 */

const SERVICES = [
  require('../session/cluster-service').sessionService,
  require('../realtime/recovery-service').recoveryService,
  require('../state/metrics').metricsService
]

module.exports = { SERVICES }
