'use strict'

/**
 * Fault schedules: which service, the cluster's options, the faults and how
 * long the clients run. The first ones are issue 51's reproductions.
 * `chaosFaults` draws a random schedule for bench/chaos.js from the faults
 * each service is meant to survive.
 */

const SCHEDULES = {
  // Issue 51 item 1: the holder of a session's read lease answers saves while the primary is stopped
  // for longer than the lease; another worker's read must still see them. The reproduction's client
  // alone: other clients' requests queued on the holder's worker would let the primary read the
  // holder's save first, and the bug would show in some runs only.
  'session-leases-primary-stop': {
    service: 'session',
    cluster: { sessionStore: 'cluster', leaseMs: 1000 },
    clients: { sessions: 0 },
    probe: true,
    durationMs: 10000,
    faults: [{ at: 1500, fault: 'stop-primary', ms: 2000 }, { at: 5000, fault: 'stop-primary', ms: 2500 }, { at: 8500, fault: 'stop-primary', ms: 1600 }]
  },
  // The same with the primary's event loop blocked by an app's bus.handle handler.
  'session-leases-blocked-loop': {
    service: 'session',
    cluster: { sessionStore: 'cluster', leaseMs: 1000 },
    clients: { sessions: 0 },
    probe: true,
    durationMs: 14000,
    faults: [{ at: 2500, fault: 'block-primary', ms: 2000 }, { at: 7000, fault: 'block-primary', ms: 2500 }, { at: 11000, fault: 'block-primary', ms: 1600 }]
  },
  // Without leases: every read asks the primary.
  'session-no-leases': {
    service: 'session',
    cluster: { sessionStore: 'cluster', leaseMs: 0 },
    probe: true,
    durationMs: 9000,
    faults: [{ at: 1500, fault: 'stop-primary', ms: 2000 }, { at: 4000, fault: 'kill-worker' }, { at: 5500, fault: 'stop-worker', ms: 1500 }, { at: 7500, fault: 'reload' }]
  },
  // The Redis store: the primary and Redis itself may die; nothing acknowledged is lost.
  'session-redis': {
    service: 'session',
    redis: true,
    cluster: { sessionStore: 'redis' },
    durationMs: 14000,
    faults: [{ at: 2000, fault: 'kill-worker' }, { at: 4000, fault: 'stop-primary', ms: 1500 }, { at: 6500, fault: 'kill-redis', ms: 1000 }, { at: 9500, fault: 'kill-primary' }]
  },
  // Issue 51 item 3: a rate limit through `clusterize upgrade` (one window spans the run).
  'rate-limit-upgrade': {
    service: 'rate-limit',
    cluster: { rateLimit: { limit: 30, windowMs: 600000 } },
    clients: { keyEveryMs: 600000 },
    durationMs: 8000,
    faults: [{ at: 2000, fault: 'upgrade' }]
  },
  // A rate limit through worker faults, a reload and a stopped primary.
  'rate-limit-workers': {
    service: 'rate-limit',
    cluster: { rateLimit: { limit: 30, windowMs: 600000 } },
    clients: { keyEveryMs: 3000 },
    durationMs: 12000,
    faults: [{ at: 1500, fault: 'kill-worker' }, { at: 4000, fault: 'stop-primary', ms: 1500 }, { at: 7000, fault: 'reload' }]
  },
  // Issue 51 item 2: two hosts on Redis, the holder's primary stopped for longer than the lease.
  'singleton-holder-primary-stop': {
    service: 'singleton',
    redis: true,
    hosts: 2,
    cluster: { singleton: true, singletonLeaseMs: 2000 },
    durationMs: 11000,
    faults: [{ at: 3000, fault: 'stop-holder-primary', ms: 5000 }]
  },
  // Issue 51 item 4: one host, the singleton through `clusterize upgrade`.
  'singleton-upgrade': {
    service: 'singleton',
    cluster: { singleton: true },
    durationMs: 8000,
    faults: [{ at: 2000, fault: 'upgrade' }]
  },
  // One host: a killed holder and a reload hand the job over, never to two at once.
  'singleton-workers': {
    service: 'singleton',
    cluster: { singleton: true },
    durationMs: 12000,
    faults: [{ at: 2500, fault: 'kill-worker' }, { at: 5000, fault: 'stop-primary', ms: 1500 }, { at: 7500, fault: 'reload' }]
  },
  // The bus's per-sender order through worker faults and a stopped primary.
  'bus-order': {
    service: 'bus',
    cluster: { bus: true, workers: 3 },
    durationMs: 10000,
    faults: [{ at: 1500, fault: 'stop-primary', ms: 1500 }, { at: 4000, fault: 'stop-worker', ms: 1000 }, { at: 6000, fault: 'kill-worker' }]
  },
  // socket.io's connection-state recovery: per-sender order on every receiver through worker faults.
  'socketio-recovery': {
    service: 'socketio',
    cluster: { socketio: true },
    durationMs: 12000,
    faults: [{ at: 2000, fault: 'kill-worker' }, { at: 5000, fault: 'stop-primary', ms: 1500 }, { at: 8000, fault: 'reload' }]
  },
  // Issue 51 item 7: the sender on one host, receivers on both, Redis killed and restarted empty
  // (and stopped): per-sender order on every receiver of every host.
  'socketio-hosts-redis': {
    service: 'socketio',
    redis: true,
    redisRestartsEmpty: true,
    hosts: 2,
    cluster: { socketio: true },
    durationMs: 14000,
    faults: [{ at: 2000, fault: 'kill-redis', ms: 1500 }, { at: 6000, fault: 'stop-redis', ms: 2000 }, { at: 10000, fault: 'kill-redis', ms: 500 }]
  }
}

/** The faults each service is meant to survive, for random schedules. */
const SURVIVABLE = {
  'session-leases': ['stop-primary', 'block-primary', 'kill-worker', 'stop-worker', 'reload', 'upgrade'],
  'session-no-leases': ['stop-primary', 'block-primary', 'kill-worker', 'stop-worker', 'reload', 'upgrade'],
  'session-redis': ['stop-primary', 'kill-worker', 'stop-worker', 'reload', 'upgrade', 'kill-primary', 'kill-redis', 'stop-redis'],
  'rate-limit': ['stop-primary', 'block-primary', 'kill-worker', 'stop-worker', 'reload', 'upgrade'],
  // Not stop-worker: a holder paused past its lease wakes up and writes once more with its old token
  // before it can learn anything. No lease prevents that; refusing that write is what the fencing
  // token is for, and the checker cannot tell it from two holders.
  singleton: ['stop-holder-primary', 'kill-worker', 'reload', 'upgrade', 'kill-redis'],
  bus: ['stop-primary', 'block-primary', 'kill-worker', 'stop-worker', 'reload'],
  socketio: ['stop-primary', 'kill-worker', 'stop-worker', 'reload', 'upgrade'],
  'socketio-redis': ['kill-redis', 'stop-redis', 'stop-primary', 'kill-worker', 'reload']
}

/** The base of each chaos service: a schedule without faults. */
const CHAOS_BASES = {
  'session-leases': { service: 'session', cluster: { sessionStore: 'cluster', leaseMs: 1000 }, probe: true },
  'session-no-leases': { service: 'session', cluster: { sessionStore: 'cluster', leaseMs: 0 }, probe: true },
  'session-redis': { service: 'session', redis: true, cluster: { sessionStore: 'redis' } },
  'rate-limit': { service: 'rate-limit', cluster: { rateLimit: { limit: 30, windowMs: 3600000 } }, clients: { keyEveryMs: 5000 } },
  singleton: { service: 'singleton', redis: true, hosts: 2, cluster: { singleton: true, singletonLeaseMs: 2000 } },
  bus: { service: 'bus', cluster: { bus: true, workers: 3 } },
  socketio: { service: 'socketio', cluster: { socketio: true } },
  'socketio-redis': { service: 'socketio', redis: true, redisRestartsEmpty: true, hosts: 2, cluster: { socketio: true } }
}

/**
 * A random schedule for `name` (a key of CHAOS_BASES) over durationMs: a fault every 2-5 s,
 * stops of 1-3 s.
 */
function chaosSchedule (name, durationMs, random) {
  const base = CHAOS_BASES[name]
  const kinds = SURVIVABLE[name]
  const faults = []
  for (let at = 2000 + random() * 3000; at < durationMs - 3000; at += 2000 + random() * 3000) {
    faults.push({ at: Math.round(at), fault: kinds[Math.floor(random() * kinds.length)], ms: Math.round(1000 + random() * 2000) })
  }
  return Object.assign({ name, durationMs, faults }, base)
}

module.exports = { SCHEDULES, CHAOS_BASES, chaosSchedule }
