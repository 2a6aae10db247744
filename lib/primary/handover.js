'use strict'

/**
 * How the state the primary holds crosses `clusterize upgrade`: one
 * mechanism for every service of lib/services/list.js. Each definition
 * declares `handover: { crosses, what }`:
 *
 *   handedOver  the old primary exports its state, the new one imports it;
 *               from then on the old primary's workers (which serve until they
 *               have drained) are answered by the new primary: their calls,
 *               notifications and exits are passed through, so both
 *               generations count in one place. The new primary holds its own
 *               workers' calls to the service until the state has arrived.
 *   rebuilt     the new primary's workers build it again (what they hold is the truth)
 *   none        nothing the next primary needs
 *
 * A handed-over service either gives `handover: { export(), import(items) }`
 * from its start() (the generic path here), or declares `own: '<file>'`:
 * the sessions and the socket.io recovery log still travel by their own
 * messages (lib/primary/session-forward.js, lib/realtime/recovery-handover.js).
 *
 * With Redis (bus.redis), a state service's export() answers undefined: its
 * state is in Redis, shared by both primaries, and each answers its own workers.
 *
 * Messages between the primaries (the upgrade's tag, see ./upgrade.js):
 *   old -> new  state      { s, items }   a batch of a service's state
 *   old -> new  state-end  { services, workers }  all of it: the new primary answers calls from
 *                                        now on, for these old workers too (until each exits)
 *   old -> new  svc        { n?, m, c }   an old worker's call (n: numbered) or notification
 *   old -> new  svc-exit   { s, c }       an old worker exited, after its last messages
 *   new -> old  svc-reply  { n, m }       the reply envelope to call n
 */

const debug = require('debug')('clusterize:upgrade')
const { createPendingCalls } = require('../services/pending-calls')
const { SERVICE_OP, service: envelope } = require('../protocol')
const { isAlive } = require('../process-alive')

const CROSSES = Object.freeze({ HANDED_OVER: 'handedOver', REBUILT: 'rebuilt', NONE: 'none' })
const KINDS = new Set(Object.values(CROSSES))
const BATCH = 1000
/**
 * A passed call with no answer is failed after this long. The longest call a
 * worker makes is a long poll of at most a minute (singleton); the worker
 * gives up on its side first.
 */
const PASS_TIMEOUT_MS = 90000
/** After the old primary is gone: how often to look whether its workers have exited. */
const GONE_POLL_MS = 100

/**
 * Every definition declares how its state crosses an upgrade.
 * @param {Array<{ name: string, handover?: { crosses?: string, what?: string, own?: string } }>} definitions
 * @returns {string[]} one line per service that does not (empty when all do)
 */
function undeclared (definitions) {
  const problems = []
  for (const definition of definitions) {
    const declared = definition.handover
    if (!declared || !KINDS.has(declared.crosses)) {
      problems.push(`service "${definition.name}" declares no handover (handover.crosses: ${Array.from(KINDS).join(' | ')})`)
    } else if (typeof declared.what !== 'string' || declared.what === '') {
      problems.push(`service "${definition.name}": handover.what must say what crosses (or why nothing does)`)
    }
  }
  return problems
}

/**
 * Old primary: hand every service's state to `child`, then pass its workers'
 * calls to it. Synchronous up to the pass-through, so no call is answered here
 * from a state already sent.
 * @param {ReturnType<import('../services/host').createServiceHost>} host
 * @param {import('child_process').ChildProcess} child the new primary
 * @param {string} tag the upgrade messages' marker
 * @returns {{ services: string[], stop: () => void }} stop(): answer here again (the new primary failed)
 */
function handOverServices (host, child, tag) {
  const names = []
  for (const name of host.handedOver()) {
    const items = host.exportState(name)
    if (!Array.isArray(items)) continue
    names.push(name)
    for (let i = 0; i < items.length; i += BATCH) child.send({ [tag]: 'state', s: name, items: items.slice(i, i + BATCH) }, unsent)
    if (items.length === 0) child.send({ [tag]: 'state', s: name, items: [] }, unsent)
    debug('handed %d items of %s to %d', items.length, name, child.pid)
  }
  child.send({ [tag]: 'state-end', services: names, workers: host.callers() }, unsent)
  if (names.length === 0) return { services: names, stop () {} }
  const pending = createPendingCalls({ unref: true })
  function onMessage (message) {
    if (!message || message[tag] !== 'svc-reply' || typeof message.n !== 'number') return
    const call = pending.take(message.n)
    if (call !== undefined) call.resolve(message.m)
  }
  function failAll () {
    pending.failAll((call) => call.resolve(failure(call.id, 'the new primary went away before it answered')))
  }
  child.on('message', onMessage)
  child.once('disconnect', failAll)
  host.passThrough({
    names,
    sink: {
      message (message, caller, respond) {
        if (!child.connected) {
          if (message.op === SERVICE_OP.CALL) respond(failure(message.id, 'the new primary is gone'))
          return
        }
        if (message.op !== SERVICE_OP.CALL) {
          child.send({ [tag]: 'svc', m: message, c: caller }, unsent)
          return
        }
        pending.add({ id: message.id }, PASS_TIMEOUT_MS, function unanswered (call) {
          call.resolve(failure(call.id, `the new primary did not answer within ${PASS_TIMEOUT_MS} ms`))
        }, function send (n) {
          child.send({ [tag]: 'svc', n, m: message, c: caller }, function sent (err) {
            const call = err ? pending.take(n) : undefined
            if (call !== undefined) call.resolve(failure(call.id, err.message))
          })
        }).then(respond)
      },
      exit (name, caller) {
        if (child.connected) child.send({ [tag]: 'svc-exit', s: name, c: caller }, unsent)
      }
    }
  })
  return {
    services: names,
    stop () {
      host.passThrough(null)
      child.removeListener('message', onMessage)
      child.removeListener('disconnect', failAll)
      failAll()
    }
  }
}

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
 * old workers it passes on. release() when no state will come (`go` from an
 * old primary without this mechanism, or the old primary gone).
 * @param {ReturnType<import('../services/host').createServiceHost>} host
 * @param {(message: object) => void} send to the old primary
 * @param {string} tag
 * @returns {{ onMessage: (message: object) => boolean, release: () => void, oldGone: () => void }}
 *   onMessage: true when the message was one of this mechanism's
 */
function takeOverServices (host, send, tag) {
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
  function release () {
    if (released) return
    released = true
    host.release()
  }
  /**
   * The old primary went away: its workers whose exit it did not pass on are
   * forgotten once their process is gone (not after a time: one may still be
   * running a singleton's job while it drains).
   */
  function oldGone () {
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
  return {
    release,
    oldGone,
    onMessage (message) {
      switch (message[tag]) {
        case 'state':
          if (typeof message.s === 'string' && Array.isArray(message.items)) host.importState(message.s, message.items)
          return true
        case 'state-end':
          debug('state of %j taken over', message.services)
          if (Array.isArray(message.services) && Array.isArray(message.workers)) {
            for (const c of message.workers) {
              const caller = checkCaller(c)
              if (caller === null) continue
              for (const name of message.services) if (typeof name === 'string') seen(name, caller)
            }
          }
          release()
          return true
        case 'svc': {
          const caller = checkCaller(message.c)
          if (caller === null || !message.m) return true
          if (typeof message.m.s === 'string') seen(message.m.s, caller)
          const n = message.n
          host.answerPassed(message.m, caller, typeof n === 'number' ? (reply) => send({ [tag]: 'svc-reply', n, m: reply }) : noReply)
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

function failure (id, why) {
  return envelope.failure(id, { message: `service call passed to the new primary during an upgrade: ${why}` })
}

function noReply () {}

function unsent (err) {
  if (err) debug('not sent to the new primary: %s', err.message)
}

module.exports = { CROSSES, undeclared, holdForHandover, handOverServices, takeOverServices, PASS_TIMEOUT_MS }
