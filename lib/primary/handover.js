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
 * A handed-over service gives `handover` from its start() (lib/services/host.js):
 *   export()         old primary: its state now, as items (undefined: nothing to hand
 *                    over, e.g. the state is in Redis, shared by both primaries)
 *   import(items)    new primary: one batch of them
 *   prepare()        optional, old primary, before export(): a Promise that settles once
 *                    everything already answered is in the state (the session store's
 *                    read leases are revoked)
 *   resume()         optional, old primary: the upgrade failed after prepare(); go on as before
 *   route(kind, method)  optional, old primary: where one of its workers' calls
 *                    ('request') or notifications ('notification') goes while passing:
 *                    'there' (the default), 'here' (this primary answers it), or 'both'
 *                    (here first, then there; a call is answered with there's answer);
 *                    route('exit'): 'both' when an old worker's exit is forgotten here
 *                    too (by default only the new primary forgets it)
 *   attach({ send }) optional, new primary: all the state is here; send(data) reaches the
 *                    service's fromSuccessor(data) in the old primary (socket.io recovery
 *                    sends the packets it numbers down to the old workers' clients)
 *   settled()        optional, new primary: no more state will come, serve
 *   detach()         optional, new primary: the old primary is gone
 *
 * The app's values inside (session data, socket.io packets) cross with the
 * workers' serialization (./handover-codec.js).
 *
 * This file: the declarations and the old primary's side; the new primary's
 * side is ./handover-take.js.
 *
 * Messages between the primaries (the upgrade's tag, see ./upgrade.js):
 *   old -> new  state      { s, items }   a batch of a service's state
 *   old -> new  state-end  { services, workers }  all of it: the new primary answers calls from
 *                                        now on, for these old workers too (until each exits)
 *   old -> new  svc        { n?, m, c }   an old worker's call (n: numbered) or notification
 *   old -> new  svc-exit   { s, c }       an old worker exited, after its last messages
 *   new -> old  svc-reply  { n, m }       the reply envelope to call n
 *   new -> old  svc-down   { s, d }       a service's message to its old self (fromSuccessor)
 * A new primary of an earlier clusterize (a rollback; its `ready` does not say
 * `handover: 1`) gets only what it understood then: the sessions (`sessions`, then
 * `write` for each session write of the old workers), and nothing is passed through.
 */

const debug = require('debug')('clusterize:upgrade')
const { createPendingCalls } = require('../services/pending-calls')
const { SERVICE_OP, service: envelope } = require('../protocol')
const { pack, unpack } = require('./handover-codec')

const CROSSES = Object.freeze({ HANDED_OVER: 'handedOver', REBUILT: 'rebuilt', NONE: 'none' })
const KINDS = new Set(Object.values(CROSSES))
const ROUTES = new Set(['there', 'here', 'both'])
/** Items per message: a large state goes over in many bounded writes. */
const BATCH = 1000
/** What a `ready` carries when its primary takes state by this mechanism. */
const HANDOVER_VERSION = 1
/**
 * A passed call with no answer is failed after this long. The longest call a
 * worker makes is a long poll of at most a minute (singleton); the worker
 * gives up on its side first (a session request after the store's timeoutMs, a 503).
 */
const PASS_TIMEOUT_MS = 90000

/**
 * Every definition declares how its state crosses an upgrade.
 * @param {Array<{ name: string, handover?: { crosses?: string, what?: string } }>} definitions
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
 * Old primary, before handOverServices(): settle what each service has
 * already answered into its state (prepare()).
 * @param {ReturnType<import('../services/host').createServiceHost>} host
 * @returns {Promise<{ resume: () => void }>} resume(): the upgrade failed, undo what prepare() did
 */
async function prepareServices (host) {
  const prepared = []
  for (const name of host.handedOver()) {
    const handover = host.handoverOf(name)
    if (typeof handover.prepare !== 'function') continue
    prepared.push(handover)
    await handover.prepare()
  }
  return {
    resume () {
      for (const handover of prepared) if (typeof handover.resume === 'function') handover.resume()
    }
  }
}

/**
 * Old primary: hand every service's state to `child`, then pass its workers'
 * calls to it. Synchronous from the first export to the pass-through, so no
 * call is answered here from a state already sent.
 * @param {ReturnType<import('../services/host').createServiceHost>} host
 * @param {import('child_process').ChildProcess} child the new primary
 * @param {string} tag the upgrade messages' marker
 * @param {{ serialization?: 'json'|'advanced', successor?: { handover?: number } }} [options]
 *   serialization: the workers' (bus.serialization); successor: the new primary's `ready`
 * @returns {{ services: string[], earlier?: true, stop: () => void }} stop(): answer here again (the new
 *   primary failed); earlier: the new primary is an earlier clusterize, which took what it knew
 */
function handOverServices (host, child, tag, options) {
  const serialization = (options && options.serialization) || 'json'
  const successor = (options && options.successor) || { handover: HANDOVER_VERSION }
  // A later release speaks this version too (its `ready` says the highest it speaks).
  if (!(successor.handover >= HANDOVER_VERSION)) return handOverToEarlier(host, child, tag)
  const names = []
  for (const name of host.handedOver()) {
    const items = host.exportState(name)
    if (!Array.isArray(items)) continue
    names.push(name)
    for (let i = 0; i < items.length; i += BATCH) child.send({ [tag]: 'state', s: name, items: pack(items.slice(i, i + BATCH), serialization) }, unsent)
    if (items.length === 0) child.send({ [tag]: 'state', s: name, items: pack([], serialization) }, unsent)
    debug('handed %d items of %s to %d', items.length, name, child.pid)
  }
  child.send({ [tag]: 'state-end', services: names, workers: host.callers() }, unsent)
  if (names.length === 0) return { services: names, stop () {} }
  const pending = createPendingCalls({ unref: true })
  function onMessage (message) {
    if (!message) return
    if (message[tag] === 'svc-reply' && typeof message.n === 'number') {
      const call = pending.take(message.n)
      if (call === undefined) return
      const reply = unpack(message.m)
      call.resolve(reply && typeof reply === 'object' ? reply : failure(call.id, 'its answer could not be read here'))
    } else if (message[tag] === 'svc-down' && typeof message.s === 'string' && names.includes(message.s)) {
      const data = unpack(message.d)
      if (data !== undefined) fromSuccessor(host, message.s, data)
    }
  }
  function failAll () {
    pending.failAll((call) => call.resolve(failure(call.id, 'the new primary went away before it answered')))
  }
  function pass (message, caller, respond) {
    if (!child.connected) {
      if (message.op === SERVICE_OP.CALL) respond(failure(message.id, 'the new primary is gone'))
      return
    }
    if (message.op !== SERVICE_OP.CALL) {
      child.send({ [tag]: 'svc', m: pack(message, serialization), c: caller }, unsent)
      return
    }
    pending.add({ id: message.id }, PASS_TIMEOUT_MS, function unanswered (call) {
      call.resolve(failure(call.id, `the new primary did not answer within ${PASS_TIMEOUT_MS} ms`))
    }, function send (n) {
      child.send({ [tag]: 'svc', n, m: pack(message, serialization), c: caller }, function sent (err) {
        const call = err ? pending.take(n) : undefined
        if (call !== undefined) call.resolve(failure(call.id, err.message))
      })
    }).then(respond)
  }
  child.on('message', onMessage)
  child.once('disconnect', failAll)
  host.passThrough({
    names,
    sink: {
      message (message, caller, respond) {
        const route = routeOf(host.handoverOf(message.s), message.op === SERVICE_OP.CALL ? 'request' : 'notification', message.m)
        if (route === 'here') return host.answerHere(message, caller, respond)
        if (route === 'there' || message.op !== SERVICE_OP.CALL) {
          if (route === 'both') host.answerHere(message, caller, noReply)
          return pass(message, caller, respond)
        }
        // 'both', a call: answered here first (kept should the new primary fail), then there.
        host.answerHere(message, caller, function answeredHere () { pass(message, caller, respond) })
      },
      exit (name, caller) {
        if (child.connected) child.send({ [tag]: 'svc-exit', s: name, c: caller }, unsent)
        return routeOf(host.handoverOf(name), 'exit') === 'both'
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
 * A new primary of an earlier clusterize (0.2.0, a rollback) takes only what a
 * service declares in `handover.legacy` `{ message, writes }`, by the messages
 * it knew: the snapshot, then each of `writes` that this primary answers for its
 * draining workers (which it keeps answering itself), as `write` once applied.
 */
function handOverToEarlier (host, child, tag) {
  const writes = new Map()
  for (const name of host.handedOver()) {
    const legacy = host.handoverOf(name).legacy
    const items = legacy ? host.exportState(name) : undefined
    if (!Array.isArray(items)) continue
    for (let i = 0; i < items.length; i += BATCH) child.send({ [tag]: legacy.message, entries: items.slice(i, i + BATCH) }, unsent)
    debug('handed %d items of %s to %d, an earlier clusterize', items.length, name, child.pid)
    writes.set(name, new Set(legacy.writes || []))
  }
  const done = { services: [], earlier: true, stop () {} }
  if (writes.size === 0) return done
  host.passThrough({
    names: Array.from(writes.keys()),
    sink: {
      message (message, caller, respond) {
        host.answerHere(message, caller, function answered (reply) {
          respond(reply)
          if (reply.ok !== true || !writes.get(message.s).has(message.m) || !child.connected) return
          const msg = Object.assign({}, message.d)
          delete msg.lease
          child.send({ [tag]: 'write', msg }, unsent)
        })
      },
      exit () {
        return true
      }
    }
  })
  done.stop = function stopForwarding () { host.passThrough(null) }
  return done
}

function routeOf (handover, kind, method) {
  if (!handover || typeof handover.route !== 'function') return 'there'
  const route = handover.route(kind, method)
  return ROUTES.has(route) ? route : 'there'
}

function fromSuccessor (host, name, data) {
  const handover = host.handoverOf(name)
  if (!handover || typeof handover.fromSuccessor !== 'function') return
  try {
    handover.fromSuccessor(data)
  } catch (err) {
    debug('%s: a message from the new primary failed: %s', name, err && err.message)
  }
}

function failure (id, why) {
  return envelope.failure(id, { message: `service call passed to the new primary during an upgrade: ${why}` })
}

function noReply () {}

function unsent (err) {
  if (err) debug('not sent to the new primary: %s', err.message)
}

module.exports = { CROSSES, HANDOVER_VERSION, undeclared, prepareServices, handOverServices, PASS_TIMEOUT_MS, BATCH }
