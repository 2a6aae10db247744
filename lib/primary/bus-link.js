'use strict'

/**
 * Where the primary meets the bus and the session backend it holds.
 */

const busModule = require('../bus')
const { attachSessionBackend, backendFor } = require('../session/cluster-backend')

function attachPrimary (config, log) {
  busModule.configureBus(config.bus, { logger: log, role: 'primary' })
  // Cheap until a worker uses session({ store: 'cluster' }): an empty Map.
  attachSessionBackend(busModule.internalBus)
}

module.exports = {
  attachPrimary,
  addWorker: busModule.busAddWorker,
  removeWorker: busModule.busRemoveWorker,
  onWorkerMessage: busModule.busOnWorkerMessage,
  status: busModule.busStatus,
  /** What the cluster session store holds (sessions, bytes, bounds, evictions), for stats(). */
  sessions: () => backendFor(busModule.internalBus).stats(),
  close: busModule.busClose
}
