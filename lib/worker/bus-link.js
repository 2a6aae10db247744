'use strict'

/**
 * Where the worker runtime meets the bus and the session store status.
 */

const busModule = require('../bus')
const { sessionStatus } = require('../session/status')
const { setSessionLogger } = require('../session/log')

function attachWorker (config, log, channel, id, generation) {
  busModule.configureBus(config.bus, { logger: log, role: 'worker' })
  setSessionLogger(log)
  busModule.busAttachToPrimary({ channel, id, generation })
}

/** Single-process mode: the bus and the cluster session store live in this process. */
function useLocal (config, log) {
  busModule.configureBus(config.bus, { logger: log, role: 'local' })
  setSessionLogger(log)
  require('../session/cluster-backend').attachSessionBackend(busModule.internalBus)
}

module.exports = {
  attachWorker,
  useLocal,
  onPrimaryMessage: busModule.busOnPrimaryMessage,
  sessionStatus,
  status: busModule.busStatus,
  /** What the cluster session store holds, for stats() (single-process mode). */
  sessions: () => {
    const backend = require('../session/cluster-backend').backendFor(busModule.internalBus)
    return backend ? backend.stats() : null
  },
  close: busModule.busClose
}
