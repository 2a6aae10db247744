'use strict'

/**
 * The two primaries of `clusterize upgrade` in one process: two service
 * hosts (lib/services/host.js) joined by lib/primary/handover.js as the
 * upgrade joins them, over a channel that copies each message as the
 * upgrade's JSON IPC channel does and delivers it on a later turn, in order.
 * Workers are records on a host, their calls envelopes as over IPC.
 */

const { EventEmitter } = require('events')
const { prepareServices, handOverServices } = require('../../lib/primary/handover')
const { takeOverServices, holdForHandover } = require('../../lib/primary/handover-take')
const { service: envelope, SERVICE_OP } = require('../../lib/protocol')

const TAG = '$czUpgrade'
const copy = (message) => JSON.parse(JSON.stringify(message))

/**
 * A worker of `host`: its calls and notifications go in as envelopes, its
 * replies and the pushes to it come back through its channel.
 * @param {ReturnType<import('../../lib/services/host').createServiceHost>} host
 * @param {number} pid
 */
function workerOf (host, pid) {
  const waiting = new Map()
  const pushes = []
  let nextId = 1
  const record = {
    id: pid % 1000,
    pid,
    generation: 1,
    channel: {
      post (message) {
        if (message.op === SERVICE_OP.PUSH) return pushes.push(message)
        const call = waiting.get(message.id)
        if (call === undefined) return
        waiting.delete(message.id)
        if (message.ok) call.resolve(message.d)
        else call.reject(Object.assign(new Error(message.e && message.e.message), { wire: message.e }))
      }
    }
  }
  host.addWorker(record)
  return {
    pid,
    pushes,
    call (service, method, data) {
      const id = nextId++
      return new Promise((resolve, reject) => {
        waiting.set(id, { resolve, reject })
        host.onWorkerMessage(record, envelope.call(id, service, method, data))
      })
    },
    notify (service, method, data) {
      host.onWorkerMessage(record, envelope.notify(service, method, data))
    },
    exit () {
      host.removeWorker(record)
    }
  }
}

/**
 * Join `oldHost` (the primary being replaced) and `newHost` (the new one,
 * holding its workers' calls until the state is here).
 * @param {object} oldHost
 * @param {object} newHost
 * @param {{ serialization?: 'json'|'advanced' }} [options]
 */
function joinPrimaries (oldHost, newHost, options) {
  const serialization = (options && options.serialization) || 'json'
  const child = new EventEmitter()
  child.pid = 0
  child.connected = true
  let inFlight = 0
  function later (fn) {
    inFlight++
    setImmediate(() => {
      inFlight--
      if (child.connected) fn()
    })
  }
  child.send = function send (message, sent) {
    const copied = copy(message)
    later(() => taking.onMessage(copied))
    if (sent) setImmediate(sent)
    return true
  }
  holdForHandover(newHost)
  const taking = takeOverServices(newHost, (message) => {
    const copied = copy(message)
    later(() => child.emit('message', copied))
  }, TAG, { serialization })
  let carried = null
  let prepared = null
  return {
    taking,
    /** The old primary hands over (after prepare), then `go`: the new one serves. */
    async handOver () {
      prepared = await prepareServices(oldHost)
      carried = handOverServices(oldHost, child, TAG, { serialization, successor: { handover: taking.version } })
      later(() => taking.release())
      return carried
    },
    /** The new primary failed before it served: the old one answers again. */
    fail () {
      child.connected = false
      child.emit('disconnect')
      carried.stop()
      prepared.resume()
    },
    /** The old primary exited. */
    oldGone () {
      taking.oldGone()
    },
    /** Until every message sent either way so far (and what they caused) is delivered. */
    async flush () {
      for (let i = 0; i < 1000; i++) {
        await new Promise((resolve) => setImmediate(resolve))
        if (inFlight === 0) {
          await new Promise((resolve) => setImmediate(resolve))
          if (inFlight === 0) return
        }
      }
      throw new Error('the primaries kept messaging for 1000 turns')
    }
  }
}

module.exports = { joinPrimaries, workerOf, TAG }
