'use strict'

/**
 * The `clusterize-express/rate-limit` entry point: ClusterStore, a store for
 * express-rate-limit whose counts the cluster's primary holds (or Redis,
 * across hosts). Loads nothing of express-rate-limit itself.
 */

const { ClusterStore } = require('./lib/state/rate-limit-store')

module.exports = { ClusterStore }
