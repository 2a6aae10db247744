'use strict'

/**
 * Where the worker runtime meets the bus and the session store status.
 */

const busModule = require('../bus')
const { sessionStatus } = require('../session/status')
const { useSessionLogger } = require('../session/log')

function attachWorker (config, log, channel, id, generation) {
  useSessionLogger(log)
  busModule.configureBus(config.bus, { logger: log, role: 'worker' })
  busModule.busAttachToPrimary({ channel, id, generation })
}

/** Single-process mode: the bus and the cluster session store live in this process. */
function useLocal (config, log) {
  useSessionLogger(log)
  busModule.configureBus(config.bus, { logger: log, role: 'local' })
  require('../session/cluster-backend').attachSessionBackend(busModule.bus)
}

module.exports = {
  attachWorker,
  useLocal,
  onPrimaryMessage: busModule.busOnPrimaryMessage,
  sessionStatus,
  status: busModule.busStatus,
  close: busModule.busClose
}
