'use strict'

/**
 * The new primary's side of the one mechanism that carries every
 * primary-held service's state across `clusterize upgrade` (read
 * ./handover.js first): hold its own workers' calls to the handed-over
 * services, import the old primary's state, then answer the calls of the old
 * workers it passes on, until each of them has exited.
 */

const debug = require('debug')('clusterize:upgrade')
const { isAlive } = require('../process-alive')
const { pack, unpack } = require('./handover-codec')
const { HANDOVER_VERSION } = require('./handover')

/** After the old primary is gone: how often to look whether its workers have exited. */
const GONE_POLL_MS = 100

/**
 * New primary, as its services start: its workers' calls to the handed-over
 * services wait until the old primary's state has arrived (takeOverServices).
 * @param {ReturnType<import('../services/host').createServiceHost>} host
 */
function holdForHandover (host) {
  host.hold(host.handedOver())
}

/**
 * New primary: import the old primary's state, then answer the calls of the
 * old workers it passes on. release() when no more state will come (`go`, or
 * the old primary gone).
 * @param {ReturnType<import('../services/host').createServiceHost>} host
 * @param {(message: object) => void} send to the old primary
 * @param {string} tag
 * @param {{ serialization?: 'json'|'advanced' }} [options] this primary's bus.serialization
 * @returns {{ onMessage: (message: object) => boolean, release: () => void, oldGone: () => void, version: number }}
 *   onMessage: true when the message was one of this mechanism's; version: what `ready` says
 */
function takeOverServices (host, send, tag, options) {
  const serialization = (options && options.serialization) || 'json'
  let released = false
  /** The old workers seen through the pass-through and not yet reported gone: pid -> { caller, services } */
  const passedCallers = new Map()
  function seen (name, caller) {
    let known = passedCallers.get(caller.pid)
    if (known === undefined) {
      known = { caller, services: new Set() }
      passedCallers.set(caller.pid, known)
    }
    known.services.add(name)
  }
  function each (hook) {
    for (const name of host.handedOver()) {
      const handover = host.handoverOf(name)
      if (typeof handover[hook] !== 'function') continue
      try {
        handover[hook](name)
      } catch (err) {
        debug('%s.%s failed: %s', name, hook, err && err.message)
      }
    }
  }
  function release () {
    if (released) return
    released = true
    each('settled')
    host.release()
  }
  /**
   * The old primary went away: its workers whose exit it did not pass on are
   * forgotten once their process is gone (not after a time: one may still be
   * running a singleton's job while it drains).
   */
  function oldGone () {
    each('detach')
    release()
    if (passedCallers.size === 0) return
    const timer = setInterval(function forgetGoneWorkers () {
      for (const [pid, known] of passedCallers) {
        if (isAlive(pid)) continue
        passedCallers.delete(pid)
        for (const name of known.services) host.passedExit(name, known.caller)
      }
      if (passedCallers.size === 0) clearInterval(timer)
    }, GONE_POLL_MS)
    timer.unref()
  }
  function attach (names) {
    for (const name of names) {
      const handover = host.handoverOf(name)
      if (!handover || typeof handover.attach !== 'function') continue
      handover.attach({ send: (data) => send({ [tag]: 'svc-down', s: name, d: pack(data, serialization) }) })
    }
  }
  return {
    version: HANDOVER_VERSION,
    release,
    oldGone,
    onMessage (message) {
      switch (message[tag]) {
        case 'state': {
          const items = unpack(message.items)
          if (typeof message.s === 'string' && Array.isArray(items)) host.importState(message.s, items)
          return true
        }
        case 'state-end': {
          debug('state of %j taken over', message.services)
          const names = Array.isArray(message.services) ? message.services.filter((name) => typeof name === 'string') : []
          if (Array.isArray(message.workers)) {
            for (const c of message.workers) {
              const caller = checkCaller(c)
              if (caller === null) continue
              for (const name of names) seen(name, caller)
            }
          }
          attach(names)
          release()
          return true
        }
        case 'svc': {
          const caller = checkCaller(message.c)
          const passed = unpack(message.m)
          if (caller === null || !passed || typeof passed !== 'object') return true
          if (typeof passed.s === 'string') seen(passed.s, caller)
          const n = message.n
          host.answerPassed(passed, caller, typeof n === 'number' ? (reply) => send({ [tag]: 'svc-reply', n, m: pack(reply, serialization) }) : noReply)
          return true
        }
        case 'svc-exit': {
          const caller = checkCaller(message.c)
          if (caller === null || typeof message.s !== 'string') return true
          const known = passedCallers.get(caller.pid)
          if (known !== undefined) {
            known.services.delete(message.s)
            if (known.services.size === 0) passedCallers.delete(caller.pid)
          }
          host.passedExit(message.s, caller)
          return true
        }
        default:
          return false
      }
    }
  }
}

function checkCaller (c) {
  if (!c || !Number.isInteger(c.pid) || !Number.isInteger(c.id)) return null
  return { id: c.id, pid: c.pid, generation: Number.isInteger(c.generation) ? c.generation : 0 }
}

function noReply () {}

module.exports = { holdForHandover, takeOverServices }
