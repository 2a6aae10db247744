'use strict'

/**
 * Every message kind that travels between the primary and its workers, with
 * a builder for each, so senders and the routing tables agree on one name.
 * The envelope itself (`{ $cz: 1, kind, ...fields }`, batching) is lib/ipc.js.
 *
 *   worker -> primary: READY, HEARTBEAT, BOOT_ERROR, DRAINED, BUS, SERVICE, LISTEN_ASK, LOAD,
 *                      LISTENING (with a handle), ALIVE
 *   primary -> worker: CONN (with a socket handle), DRAIN, PROMOTE, BUS, SERVICE,
 *                      LISTEN (with the listening handle), SHARE, SHARE_LISTENING, ALIVE_ASK
 */

const { envelope, MARK } = require('./ipc')

const KIND = Object.freeze({
  /** The worker listens (or takes handed connections). `{ address }` */
  READY: 'ready',
  /** Health figures and the session store status. `{ figures, session }` */
  HEARTBEAT: 'heartbeat',
  /** The app failed to build. `{ message, deterministic, stack }` */
  BOOT_ERROR: 'boot-error',
  /** The worker finished draining and is about to exit. `{ timedOut }` */
  DRAINED: 'drained',
  /** A connection handed over by the primary's acceptor, as the message's handle. */
  CONN: 'conn',
  /** Stop accepting, finish in-flight work, exit. `{ timeoutMs, reason }` */
  DRAIN: 'drain',
  /** A warm spare takes a slot: start serving as that worker. `{ slot }` */
  PROMOTE: 'promote',
  /** Bus traffic (lib/bus/*), its own ops inside. */
  BUS: 'bus',
  /** 'balanced': send me a copy of the listening socket. */
  LISTEN_ASK: 'listen-ask',
  /** 'balanced': a copy of the listening socket, as the message's handle. */
  LISTEN: 'listen',
  /** 'balanced': the worker's open connections and whether it stopped accepting. `{ c, p }` */
  LOAD: 'load',
  /** 'balanced': how many open connections the worker may hold, and whether its event loop is late. `{ l, late }` */
  SHARE: 'share',
  /** The library's services (lib/services/*): calls, notifications and replies, ops in SERVICE_OP. */
  SERVICE: 'svc',
  /** 'none': send the listening socket node:cluster shared with you, for an upgrade. */
  SHARE_LISTENING: 'share-listening',
  /** The answer: the listening socket as the message's handle (none when there is none). */
  LISTENING: 'listening',
  /** Answer at once: proves the event loop ran after the question was asked (a reload's commit). `{ n }` */
  ALIVE_ASK: 'alive-ask',
  /** The answer to ALIVE_ASK. `{ n }` */
  ALIVE: 'alive'
})

/**
 * The ops inside kind SERVICE (lib/services/*). Data travels as it is: the
 * IPC channel encodes it once.
 *   worker -> primary: CALL, NOTIFY
 *   primary -> worker: REPLY, PUSH
 */
const SERVICE_OP = Object.freeze({
  /** Call a service's request handler. `{ id, s: service, m: method, d: data, x? }` (x: 1 = d is the bus codec's encoding of app data) */
  CALL: 'c',
  /** Call a service's notification handler; no answer. `{ s, m, d, x? }` */
  NOTIFY: 'n',
  /** The answer to CALL. `{ id, ok, d }` or `{ id, ok: false, e: { message, code?, name?, status? } }` */
  REPLY: 'r',
  /** A service tells one worker something; no answer (the worker may notify back). `{ s, m, d }` */
  PUSH: 'p'
})

/**
 * The ops inside kind BUS (lib/bus/*). Short strings on the wire; these names
 * are what the code reads.
 *   worker -> primary: BROADCASTS, SEND, REQUEST, GATHER, HANDLER_REPLY (and BROADCAST, single)
 *   primary -> worker: RELAYS, RELAY, RESPONSE, GATHER_RESULT, HANDLER_ASK, CREDIT, DROPPED
 */
const BUS_OP = Object.freeze({
  /** One broadcast. `{ t, d, n? }` */
  BROADCAST: 'b',
  /** The broadcasts a worker made in one tick. `{ m: [topic, payload, ...], n }` (n: bytes the sender counted, credited back) */
  BROADCASTS: 'B',
  /** To one worker slot or the primary. `{ to, t, d, n }` */
  SEND: 's',
  /** Ask the primary's handler. `{ id, t, d }` */
  REQUEST: 'rq',
  /** Ask every worker's handler through the primary. `{ id, t, d, ms }` */
  GATHER: 'gq',
  /** A worker's answer to HANDLER_ASK. `{ id, ok, d, e }` */
  HANDLER_REPLY: 'hr',
  /** Relayed messages of one tick. `{ m: [topic, payload, from, generation, ...] }` */
  RELAYS: 'M',
  /** One relayed or sent message. `{ t, d, f, g, h? }` */
  RELAY: 'm',
  /** The primary's answer to REQUEST. `{ id, ok, d, e }` */
  RESPONSE: 'rs',
  /** The answers to GATHER. `{ id, r: answers, m: missing }` */
  GATHER_RESULT: 'gs',
  /** Run your handler for a gather. `{ id, t, d, f, g }` */
  HANDLER_ASK: 'ha',
  /** Bytes of your broadcasts/sends every receiver has taken: they leave your budget. `{ n }` */
  CREDIT: 'cr',
  /** Messages of yours dropped for a stuck worker. `{ w: slot id, n: count, t: a topic }` */
  DROPPED: 'dr'
})

/**
 * Builders for the bus envelopes, one literal shape each (they are on the
 * hot path: no field copying).
 */
const bus = {
  broadcasts: (m, n) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.BROADCASTS, m, n }),
  send: (to, t, d, n) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.SEND, to, t, d, n }),
  request: (id, t, d) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.REQUEST, id, t, d }),
  gather: (id, t, d, ms) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.GATHER, id, t, d, ms }),
  handlerReply: (id, ok, d, e) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.HANDLER_REPLY, id, ok, d, e }),
  relays: (m) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.RELAYS, m }),
  relay: (t, d, f, g, h) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.RELAY, t, d, f, g, h }),
  response: (id, ok, d, e) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.RESPONSE, id, ok, d, e }),
  gatherResult: (id, r, m) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.GATHER_RESULT, id, r, m }),
  handlerAsk: (id, t, d, f, g) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.HANDLER_ASK, id, t, d, f, g }),
  credit: (n) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.CREDIT, n }),
  dropped: (w, n, t) => ({ [MARK]: 1, kind: KIND.BUS, op: BUS_OP.DROPPED, w, n, t })
}

/** Builders for the service envelopes (hot path: one literal each). */
const service = {
  call: (id, s, m, d, x) => x
    ? { [MARK]: 1, kind: KIND.SERVICE, op: SERVICE_OP.CALL, id, s, m, d, x: 1 }
    : { [MARK]: 1, kind: KIND.SERVICE, op: SERVICE_OP.CALL, id, s, m, d },
  notify: (s, m, d, x) => x
    ? { [MARK]: 1, kind: KIND.SERVICE, op: SERVICE_OP.NOTIFY, s, m, d, x: 1 }
    : { [MARK]: 1, kind: KIND.SERVICE, op: SERVICE_OP.NOTIFY, s, m, d },
  reply: (id, d) => ({ [MARK]: 1, kind: KIND.SERVICE, op: SERVICE_OP.REPLY, id, ok: true, d }),
  failure: (id, e) => ({ [MARK]: 1, kind: KIND.SERVICE, op: SERVICE_OP.REPLY, id, ok: false, e }),
  push: (s, m, d) => ({ [MARK]: 1, kind: KIND.SERVICE, op: SERVICE_OP.PUSH, s, m, d })
}

/** Envelopes without fields are built once. */
const CONN_MESSAGE = envelope(KIND.CONN)

/**
 * One routing table: `routes[kind](context, message, handle)`. Kinds with no
 * route go to `onUnknown`; there is no default forwarding.
 * @param {Object<string, Function>} routes
 * @param {(context: *, message: object) => void} onUnknown
 * @returns {(context: *, message: object, handle?: *) => void}
 */
function createRouter (routes, onUnknown) {
  const table = new Map(Object.entries(routes))
  return function route (context, message, handle) {
    const handler = table.get(message.kind)
    if (handler) handler(context, message, handle)
    else onUnknown(context, message)
  }
}

module.exports = {
  KIND,
  BUS_OP,
  SERVICE_OP,
  bus,
  service,
  createRouter,
  /** session: the worker's session() status at ready (so the banner can say 'none' at once), undefined when unknown. */
  ready: (address, session) => envelope(KIND.READY, { address, session }),
  heartbeat: (figures, session) => envelope(KIND.HEARTBEAT, { figures, session }),
  bootError: (err) => envelope(KIND.BOOT_ERROR, {
    message: String(err && err.message),
    deterministic: Boolean(err && err.appInvalid),
    stack: err && err.stack ? String(err.stack) : undefined
  }),
  drained: (timedOut) => envelope(KIND.DRAINED, { timedOut }),
  drain: (timeoutMs, reason) => envelope(KIND.DRAIN, { timeoutMs, reason }),
  promote: (slot) => envelope(KIND.PROMOTE, { slot }),
  shareListening: () => envelope(KIND.SHARE_LISTENING),
  listening: () => envelope(KIND.LISTENING),
  aliveAsk: (n) => envelope(KIND.ALIVE_ASK, { n }),
  alive: (n) => envelope(KIND.ALIVE, { n }),
  conn: () => CONN_MESSAGE,
  listenAsk: () => envelope(KIND.LISTEN_ASK),
  listen: () => envelope(KIND.LISTEN),
  load: (c, p) => envelope(KIND.LOAD, { c, p }),
  share: (l, late) => envelope(KIND.SHARE, { l, late }),
  /** A handed connection whose first bytes the primary already read ('sticky' with sid routing). */
  connWithHead: (head) => envelope(KIND.CONN, { head: head.toString('latin1') })
}
