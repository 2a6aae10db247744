'use strict'

/**
 * Follows each worker's session store status (sent in its heartbeats): logs
 * when a store becomes unavailable or recovers, and says why /ready is
 * degraded.
 */

/**
 * @param {import('./supervisor').Supervisor} supervisor
 * @param {object} log
 * @param {(name: 'session:down'|'session:up', info: object) => void} [notify] for the dashboard's timeline
 * @returns {{ degradation: () => string }}
 */
function watchSessionStores (supervisor, log, notify) {
  // Records whose store is down now; the outage is logged once for the
  // cluster, when the first worker sees it, and ends when none does.
  const down = new Set()

  supervisor.on('record:heartbeat', function onHeartbeat (record) {
    const session = record.session
    const isDown = Boolean(session && session.available === false)
    if (isDown === down.has(record)) return
    if (isDown) {
      down.add(record)
      if (down.size === 1) {
        log.warn(`session store ${session.store} unavailable: ${session.lastError}; session requests get 503 until it recovers (seen by worker ${record.id})`, { pid: record.pid })
      }
      if (notify) notify('session:down', { id: record.id, pid: record.pid, store: session.store, lastError: session.lastError })
    } else {
      down.delete(record)
      if (down.size === 0) log.info(`session store ${session ? session.store : ''} available again`, { pid: record.pid })
      if (notify) notify('session:up', { id: record.id, pid: record.pid, store: session ? session.store : '' })
    }
  })

  // A worker that exits while its store is down no longer counts.
  supervisor.on('record:exit', (record) => down.delete(record))

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
