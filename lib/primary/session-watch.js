'use strict'

/**
 * Follows each worker's session store status (sent in its heartbeats): logs
 * when a store becomes unavailable or recovers, and says why /ready is
 * degraded.
 */

/**
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {object} log
 * @returns {{ degradation: () => string }}
 */
function watchSessionStores (supervisor, log) {
  const down = new WeakSet()

  supervisor.on('record:heartbeat', function onHeartbeat (record) {
    const session = record.session
    const isDown = Boolean(session && session.available === false)
    if (isDown === down.has(record)) return
    if (isDown) {
      down.add(record)
      log.warn(`worker ${record.id}: session store ${session.store} unavailable: ${session.lastError}; session requests get 503 until it recovers`, { pid: record.pid })
    } else {
      down.delete(record)
      log.info(`worker ${record.id}: session store ${session ? session.store : ''} available again`, { pid: record.pid })
    }
  })

  return {
    /** Why the service is degraded though ready (shown by /ready), or ''. */
    degradation () {
      for (const record of supervisor.readyRecords()) {
        if (down.has(record)) return `session store ${record.session.store} unavailable: ${record.session.lastError}`
      }
      return ''
    }
  }
}

module.exports = { watchSessionStores }
