'use strict'

/**
 * The primary-side singleton service: the lease table of this host, whose
 * names are claimed in Redis first with bus.redis (one holder per fleet).
 * Requests are long polls (see ./leases.js); a worker that exits loses
 * what it held and asked for at once (workerExit), so another worker takes
 * over as soon as the primary sees the exit.
 */

const { ClusterizeError } = require('../errors')
const { LeaseTable } = require('./leases')
const { createLocalLeaseBackend } = require('./lease-local')
const { exportLeases, importLeases } = require('./singleton-handover')

const SERVICE = 'singleton'
const SINGLETON_OP = Object.freeze({ ACQUIRE: 'acquire', WATCH: 'watch', CONFIRM: 'confirm', RELEASE: 'release' })
const MAX_NAME_LENGTH = 200
const MAX_WAIT_MS = 60000
const MIN_LEASE_MS = 100
const MAX_LEASE_MS = 3600000

/**
 * Handlers over a lease table.
 * @param {LeaseTable} table
 */
function singletonHandlers (table) {
  return {
    [SINGLETON_OP.ACQUIRE]: function acquire (data, caller) {
      return table.acquire(checkName(data), caller.pid, { waitMs: checkMs(data, 'waitMs', 1, MAX_WAIT_MS), leaseMs: checkMs(data, 'leaseMs', MIN_LEASE_MS, MAX_LEASE_MS) })
    },
    [SINGLETON_OP.WATCH]: function watch (data, caller) {
      return table.watch(checkName(data), caller.pid, checkToken(data), checkMs(data, 'waitMs', 1, MAX_WAIT_MS))
    },
    [SINGLETON_OP.CONFIRM]: function confirm (data, caller) {
      return table.confirm(checkName(data), caller.pid, checkToken(data))
    },
    [SINGLETON_OP.RELEASE]: function release (data, caller) {
      return table.release(checkName(data), caller.pid, checkToken(data))
    }
  }
}

/** The service of lib/services/list.js. */
const singletonService = {
  name: SERVICE,
  handover: { crosses: 'handedOver', what: 'who holds each name and its token (without Redis): new workers wait until the old holder released it or exited' },
  start: function startSingletonService (context) {
    const { lazyStateBackend } = require('./redis-client')
    const log = context && context.log
    const tables = lazyStateBackend(context, function buildLeaseTable (connection, namespace) {
      const backend = connection
        ? require('./lease-redis').createRedisLeaseBackend(connection.client, { namespace: namespace + ':singleton', log })
        : createLocalLeaseBackend()
      const table = new LeaseTable(backend, { log })
      table.backendClose = () => backend.close()
      return table
    })
    const requests = {}
    for (const [op, fn] of Object.entries(singletonHandlers({
      acquire: (...args) => tables.current().acquire(...args),
      watch: (...args) => tables.current().watch(...args),
      confirm: (...args) => tables.current().confirm(...args),
      release: (...args) => tables.current().release(...args)
    }))) requests[op] = fn
    return {
      requests,
      workerExit (caller) {
        const table = tables.built()
        if (table !== null) table.ownerGone(caller.pid)
      },
      handover: {
        export () {
          if (tables.shared) return undefined
          const table = tables.built()
          return table === null ? [] : exportLeases(table)
        },
        import (items) {
          if (!tables.shared) importLeases(tables.current(), items)
        }
      },
      api: {
        list () {
          const table = tables.built()
          return table === null ? [] : table.list()
        }
      },
      close () {
        const table = tables.built()
        if (table !== null) {
          table.close()
          table.backendClose()
        }
        return tables.close()
      }
    }
  }
}

function checkName (data) {
  const name = data && data.name
  if (typeof name !== 'string' || name === '' || name.length > MAX_NAME_LENGTH) throw badRequest('name', name)
  return name
}

function checkToken (data) {
  const token = data && data.token
  if (!Number.isSafeInteger(token) || token < 1) throw badRequest('token', token)
  return token
}

function checkMs (data, field, min, max) {
  const value = data && data[field]
  if (!Number.isInteger(value) || value < min || value > max) throw badRequest(field, value)
  return value
}

function badRequest (field, value) {
  return new ClusterizeError(`singleton request: bad ${field} (${typeof value})`, 'ERR_CLUSTERIZE_SINGLETON_REQUEST')
}

module.exports = { singletonService, singletonHandlers, SINGLETON_OP, SERVICE, MAX_NAME_LENGTH, MIN_LEASE_MS, MAX_LEASE_MS }
