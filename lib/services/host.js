'use strict'

/**
 * The primary's side of the service layer: the services started from one
 * list (./list.js), answering their workers' calls and notifications. In
 * single-process mode (`workers: 0`) the same host answers in-process calls.
 *
 * A service is `{ name, start(context) }`; start() returns its handlers:
 *   requests:      { method: (data, caller) => value | Promise }   (client.request)
 *   notifications: { method: (data, caller) => void }              (client.notify)
 *   workerExit(caller)   a worker process exited: forget what it held
 * start() also finds `context.push(pid, method, data)`: tell one live worker
 * something (its client's onPush handler runs); false when no such worker.
 *   close()              shutdown (may return a Promise)
 *   api                  what host.get(name) returns to the primary (stats)
 *   handover             { export(), import(items), ... } when the definition declares its state
 *                        handed over (lib/primary/handover.js carries it across an upgrade)
 * `caller` is `{ id, pid, generation }` of the worker (slot 0 and this pid in-process);
 * a worker of the other primary of an upgrade, passed on to this one, also has
 * `passed: true` (nothing can be pushed to it from here).
 */

const debug = require('debug')('clusterize:services')
const { SERVICE_OP, service: envelope } = require('../protocol')
const { ClusterizeBusError, errorToWire } = require('../bus/errors')
const { decodeAppData } = require('./app-data')

/**
 * @param {Array<{ name: string, start: (context: object) => object }>} definitions
 * @param {object} context handed to every start(): `{ config, log, isRetiringPid? }`
 */
function createServiceHost (definitions, context) {
  /** @type {Map<string, { requests: Map<string, Function>, notifications: Map<string, Function>, started: object }>} */
  const services = new Map()
  /** Worker records that may still be answered (a reply to an exited worker is dropped). */
  const records = new Set()
  /** The same records by pid, for push(). */
  const byPid = new Map()
  const log = (context && context.log) || { error () {} }
  /** During an upgrade, in the new primary: the calls to these services wait for the old one's state. */
  let held = null
  /** During an upgrade, in the old primary: these services' calls go to the new one. */
  let passing = null

  for (const definition of definitions) {
    if (services.has(definition.name)) throw new Error(`service "${definition.name}" is in the list twice`)
    const started = definition.start(Object.assign({}, context, { push: pushFrom(definition.name) })) || {}
    services.set(definition.name, {
      requests: new Map(Object.entries(started.requests || {})),
      notifications: new Map(Object.entries(started.notifications || {})),
      started
    })
    debug('service %s started', definition.name)
  }

  function pushFrom (name) {
    return function push (pid, method, data) {
      const record = byPid.get(pid)
      if (record === undefined) return false
      record.channel.post(envelope.push(name, method, data))
      return true
    }
  }

  /**
   * Run a request handler now: its value, or its Promise. Throws what the
   * handler throws, or ERR_CLUSTERIZE_BUS_NO_HANDLER for a missing service or method.
   */
  function run (name, method, data, caller) {
    const service = services.get(name)
    const fn = service === undefined ? undefined : service.requests.get(method)
    if (fn === undefined) {
      throw new ClusterizeBusError(`service "${name}" has no request "${method}" in this process`, 'ERR_CLUSTERIZE_BUS_NO_HANDLER')
    }
    return fn(data, caller)
  }

  /**
   * run() as a Promise: never throws.
   * @returns {Promise<*>}
   */
  function call (name, method, data, caller) {
    try {
      return Promise.resolve(run(name, method, data, caller))
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** Run a notification handler; what it throws is logged, never propagated. */
  function notify (name, method, data, caller) {
    const service = services.get(name)
    const fn = service === undefined ? undefined : service.notifications.get(method)
    if (fn === undefined) {
      debug('no notification %s.%s: dropped', name, method)
      return
    }
    try {
      const result = fn(data, caller)
      if (result && typeof result.then === 'function') result.then(undefined, (err) => notificationFailed(name, method, err))
    } catch (err) {
      notificationFailed(name, method, err)
    }
  }

  function notificationFailed (name, method, err) {
    log.error(`service ${name}: notification "${method}" failed: ${err && err.message}`, { err })
  }

  /**
   * An envelope of kind SERVICE from a worker. Malformed ones are ignored.
   * @param {object} record the worker's record (its channel carries the reply)
   * @param {object} message
   */
  function onWorkerMessage (record, message) {
    if (typeof message.s !== 'string' || typeof message.m !== 'string') return
    const caller = { id: record.id, pid: record.pid, generation: record.generation }
    if (held !== null && held.names.has(message.s)) {
      held.queue.push(() => onWorkerMessage(record, message))
      return
    }
    if (passing !== null && passing.names.has(message.s)) {
      passing.sink.message(message, caller, (answer) => reply(record, answer))
      return
    }
    answerMessage(message, caller, (answer) => reply(record, answer))
  }

  /**
   * Answer one SERVICE envelope (a call or a notification) for `caller`; a
   * call's answer (an envelope) goes to `respond`.
   */
  function answerMessage (message, caller, respond) {
    const isCall = message.op === SERVICE_OP.CALL && typeof message.id === 'number'
    if (!isCall && message.op !== SERVICE_OP.NOTIFY) return
    let data = message.d
    if (message.x === 1) {
      try {
        data = decodeAppData(data)
      } catch (err) {
        debug('undecodable %s.%s from worker pid %s: %s', message.s, message.m, caller.pid, err.message)
        if (isCall) respond(envelope.failure(message.id, errorToWire(err)))
        return
      }
    }
    if (!isCall) {
      notify(message.s, message.m, data, caller)
      return
    }
    const id = message.id
    call(message.s, message.m, data, caller).then(function answer (value) {
      respond(envelope.reply(id, value))
    }, function failed (err) {
      respond(envelope.failure(id, errorToWire(err)))
    })
  }

  function forget (record) {
    const caller = { id: record.id, pid: record.pid, generation: record.generation }
    for (const [name, service] of services) {
      if (held !== null && held.names.has(name)) {
        held.queue.push(() => forgetIn(name, service, caller))
        continue
      }
      // sink.exit() says whether it is forgotten here too (socket.io recovery: should the new primary fail, this one goes on).
      if (passing !== null && passing.names.has(name) && !passing.sink.exit(name, caller)) continue
      forgetIn(name, service, caller)
    }
  }

  function forgetIn (name, service, caller) {
    if (typeof service.started.workerExit !== 'function') return
    try {
      service.started.workerExit(caller)
    } catch (err) {
      log.error(`service ${name}: forgetting worker ${caller.id} failed: ${err && err.message}`, { err })
    }
  }

  function reply (record, message) {
    // A worker that exited meanwhile gets nothing: its call died with it.
    if (!records.has(record)) return
    // Calls come many per loop turn under load (the session store's): their answers share one write per turn.
    record.channel.post(message)
  }

  return {
    run,
    call,
    notify,
    onWorkerMessage,

    /** @param {object} record a forked worker's record, with its ipc.Channel */
    addWorker (record) {
      records.add(record)
      byPid.set(record.pid, record)
    },

    /**
     * A worker process exited: drop its replies, and let every service forget it once the
     * last messages it wrote before it died have been read.
     */
    removeWorker (record) {
      if (!records.delete(record)) return
      if (byPid.get(record.pid) === record) byPid.delete(record.pid)
      afterLastMessages(record, function forgetWorker () { forget(record) })
    },

    /**
     * @param {string} name
     * @returns {*} the service's `api` (undefined when it has none or is not in the list)
     */
    get (name) {
      const service = services.get(name)
      return service === undefined ? undefined : service.started.api
    },


    /** @returns {Array<{ id: number, pid: number, generation: number }>} the workers this host answers */
    callers () {
      return Array.from(records, (record) => ({ id: record.id, pid: record.pid, generation: record.generation }))
    },

    /**
     * @param {string} name
     * @returns {object|undefined} the handover a handed-over service gave (lib/primary/handover.js)
     */
    handoverOf (name) {
      const service = services.get(name)
      return service === undefined || !isHandover(service.started.handover) ? undefined : service.started.handover
    },

    /**
     * Answer one of this primary's workers' SERVICE envelopes here while the service
     * is passed through (a route of 'here' or 'both', lib/primary/handover.js).
     * @param {object} message
     * @param {{ id: number, pid: number, generation: number }} caller
     * @param {(answer: object) => void} respond gets the reply envelope of a call
     */
    answerHere (message, caller, respond) {
      answerMessage(message, caller, respond)
    },

    /**
     * The names of the services whose state is handed over by export()/import().
     * @returns {string[]}
     */
    handedOver () {
      return Array.from(services).filter(([, service]) => isHandover(service.started.handover)).map(([name]) => name)
    },

    /**
     * The state of a handed-over service, as items to import elsewhere; undefined when this
     * service has nothing to hand over now (its state is shared, e.g. in Redis).
     * @param {string} name
     * @returns {Array<*>|undefined}
     */
    exportState (name) {
      const service = services.get(name)
      return service === undefined || !isHandover(service.started.handover) ? undefined : service.started.handover.export()
    },

    /**
     * Items another primary's exportState(name) gave.
     * @param {string} name
     * @param {Array<*>} items
     */
    importState (name, items) {
      const service = services.get(name)
      if (service === undefined || !isHandover(service.started.handover)) {
        debug('state for %s: no such handed-over service here, dropped', name)
        return
      }
      service.started.handover.import(items)
    },

    /**
     * Hold every worker call, notification and exit of these services until release().
     * @param {string[]} names
     */
    hold (names) {
      if (held === null) held = { names: new Set(), queue: [] }
      for (const name of names) held.names.add(name)
    },

    /** Answer what hold() kept, in the order it came, and what comes from now on. */
    release () {
      const queue = held === null ? [] : held.queue
      held = null
      for (const run of queue) run()
    },

    /**
     * From now on, send these services' worker calls, notifications and exits to `sink`
     * (the new primary, lib/primary/handover.js); stop with passThrough(null). sink.exit()
     * answers true when the exited worker is to be forgotten here as well.
     * @param {{ names: string[], sink: { message: Function, exit: Function } }|null} route
     */
    passThrough (route) {
      passing = route === null ? null : { names: new Set(route.names), sink: route.sink }
    },

    /**
     * Answer a SERVICE envelope another primary passed on from one of its workers.
     * @param {object} message the envelope
     * @param {{ id: number, pid: number, generation: number }} caller
     * @param {(answer: object) => void} respond gets the reply envelope of a call
     */
    answerPassed (message, caller, respond) {
      if (!message || typeof message.s !== 'string' || typeof message.m !== 'string') return
      const passed = Object.assign({}, caller, { passed: true })
      if (held !== null && held.names.has(message.s)) {
        held.queue.push(() => answerMessage(message, passed, respond))
        return
      }
      answerMessage(message, passed, respond)
    },

    /**
     * Another primary's worker exited (its last passed messages came before this).
     * @param {string} name
     * @param {{ id: number, pid: number, generation: number }} caller
     */
    passedExit (name, caller) {
      const service = services.get(name)
      if (service === undefined) return
      const passed = Object.assign({}, caller, { passed: true })
      if (held !== null && held.names.has(name)) {
        held.queue.push(() => forgetIn(name, service, passed))
        return
      }
      forgetIn(name, service, passed)
    },

    /** Shutdown: close every service (Redis connections, timers). */
    close () {
      const closing = []
      for (const service of services.values()) {
        if (typeof service.started.close === 'function') closing.push(Promise.resolve().then(() => service.started.close()).catch((err) => debug('close failed: %s', err && err.message)))
      }
      return Promise.all(closing).then(() => undefined)
    }
  }
}

function isHandover (handover) {
  return Boolean(handover) && typeof handover.export === 'function' && typeof handover.import === 'function'
}

/** A worker's channel closes once its last messages are read; it should follow its exit at once. */
const LAST_MESSAGES_WAIT_MS = 1000

/**
 * Run `fn` once the worker's IPC channel has closed. Node reports a worker's exit
 * as soon as it is reaped, which can be before the messages it wrote just before
 * it died are read (a session save it answered under a lease, ./session/leases.js);
 * they are read before the channel closes. A channel that stays open (its end
 * inherited by a process the worker started) is given up on after a second, and
 * then only after the loop has polled its pipes once more: a primary that stalled
 * runs its timers first when it wakes, before it reads what the dead worker wrote.
 * @param {{ worker?: { isConnected?: Function, once?: Function, removeListener?: Function } }} record
 * @param {() => void} fn
 */
function afterLastMessages (record, fn) {
  const worker = record.worker
  if (!worker || typeof worker.isConnected !== 'function' || !worker.isConnected()) return fn()
  let done = false
  const timer = setTimeout(function stillOpen () { setImmediate(run) }, LAST_MESSAGES_WAIT_MS)
  timer.unref()
  worker.once('disconnect', run)
  function run () {
    if (done) return
    done = true
    clearTimeout(timer)
    worker.removeListener('disconnect', run)
    fn()
  }
}

module.exports = { createServiceHost, afterLastMessages }
