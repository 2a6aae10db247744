'use strict'

/**
 * The lease backend of a fleet (bus.redis): each host's primary claims a
 * name in Redis before it hands the name to one of its workers, so one
 * worker of the whole fleet runs the job.
 *
 * Keys: `<ns>:lease:<name>` = this primary's id, with the lease as TTL;
 * `<ns>:token:<name>` = the last fencing token (no TTL, a few bytes).
 *
 * No overlap across hosts, under these rules:
 * - the holding host renews every leaseMs/3; when a renewal has not
 *   succeeded for leaseMs - leaseMs/3 (Redis unreachable) or finds the key
 *   gone or taken (Redis restarted, or the host stalled past the TTL), the
 *   holder is revoked at once, before the key can expire in Redis;
 * - a claim that finds no token key (first use ever, or Redis lost its
 *   data) may come while a host that held the name before the loss still
 *   runs the job: that claim waits one lease before it hands the name out,
 *   long enough for the old holder to have been revoked;
 * - tokens come from Redis's clock (TIME) and grow by at least one per
 *   claim, so they grow across a Redis restart too.
 * Each holder must stop when its signal aborts: the margin is leaseMs/3.
 * The holder's worker does not rely on this primary to tell it: it aborts by
 * itself when it has not confirmed the lease (validFor) within the same bound,
 * counted from before it asked (lib/state/singleton.js), so a primary that
 * stalls past the TTL cannot leave its worker running beside the next host's.
 */

const crypto = require('crypto')
const os = require('os')
const debug = require('debug')('clusterize:singleton')
const { performance } = require('perf_hooks')
const { whenReady } = require('./redis-ready')

const CLAIM = `
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return { 0, 0, 0 } end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local token = last + 1
if now > token then token = now end
redis.call('SET', KEYS[2], string.format('%d', token))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local fresh = 0
if last == 0 then fresh = 1 end
return { 1, string.format('%d', token), fresh }`

const RENEW = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`

const DROP = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`

/**
 * @param {object} client ioredis client (fail fast: no offline queue, a command timeout)
 * @param {{ namespace: string, hostId?: string, log?: object, now?: () => number }} options now: a monotonic clock in ms
 */
function createRedisLeaseBackend (client, options) {
  const ns = options.namespace
  const hostId = options.hostId || `${os.hostname()}:${process.pid}:${crypto.randomBytes(6).toString('hex')}`
  // Monotonic: every use is a duration from a renewal's send time, which a wall-clock step must not stretch.
  const now = options.now || (() => performance.now())
  if (typeof client.czLeaseClaim !== 'function') {
    client.defineCommand('czLeaseClaim', { numberOfKeys: 2, lua: CLAIM })
    client.defineCommand('czLeaseRenew', { numberOfKeys: 1, lua: RENEW })
    client.defineCommand('czLeaseDrop', { numberOfKeys: 1, lua: DROP })
  }
  /** name -> { timer, lastOk, leaseMs, onLost, lost } */
  const kept = new Map()
  const leaseKey = (name) => `${ns}:lease:{${name}}`
  const tokenKey = (name) => `${ns}:token:{${name}}`

  async function claim (name, leaseMs) {
    await whenReady(client)
    let lastOk = now()
    const [ok, token, fresh] = await client.czLeaseClaim(leaseKey(name), tokenKey(name), hostId, leaseMs)
    if (Number(ok) !== 1) return null
    if (Number(fresh) === 1) {
      // A previous holder may predate a loss of Redis's data: give it one lease to be revoked.
      debug('%s: no token in Redis (first use or data lost): waiting one lease (%d ms) before handing it out', name, leaseMs)
      lastOk = await holdFor(name, leaseMs, lastOk)
      if (lastOk === null) return null
    }
    // The renewals count from the last success, the wait's included: counting from the
    // claim would revoke the new holder at its first renewal after a wait of one lease.
    const entry = kept.get(name)
    if (entry) entry.lastOk = lastOk
    else kept.set(name, { timer: null, lastOk, leaseMs, onLost: null, lost: false })
    return Number(token)
  }

  /** Keep renewing through a wait of one lease; when the last renewal succeeded, or null when the lease was lost meanwhile. */
  async function holdFor (name, leaseMs, since) {
    const deadline = since + leaseMs
    let lastOk = since
    while (now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(leaseMs / 3, deadline - now()))).unref())
      const at = now()
      if (!(await renewOnce(name, leaseMs).catch(() => false))) {
        if (at - lastOk > leaseMs - leaseMs / 3) return null
        continue
      }
      lastOk = at
    }
    return lastOk
  }

  async function renewOnce (name, leaseMs) {
    return Number(await client.czLeaseRenew(leaseKey(name), hostId, leaseMs)) === 1
  }

  /**
   * How long this host may still count `name` as its own, in ms from now: until leaseMs - leaseMs/3
   * after the *send* time of the last renewal that succeeded (the key lives at least leaseMs from
   * then), leaving leaseMs/3 for the holder to stop before the key can expire. 0 once lost.
   * @param {string} name
   * @returns {number}
   */
  function validFor (name) {
    const entry = kept.get(name)
    if (!entry || entry.lost) return 0
    return Math.max(0, entry.lastOk + entry.leaseMs - marginOf(entry.leaseMs) - now())
  }

  function keep (name, leaseMs, onLost) {
    let entry = kept.get(name)
    if (!entry) {
      entry = { timer: null, lastOk: now(), leaseMs, onLost: null, lost: false }
      kept.set(name, entry)
    }
    entry.onLost = onLost
    entry.lost = false
    if (entry.timer !== null) return
    const every = marginOf(leaseMs)
    entry.timer = setInterval(function renew () {
      if (entry.lost) return
      const at = now()
      renewOnce(name, leaseMs).then(function renewed (ok) {
        if (ok) entry.lastOk = Math.max(entry.lastOk, at)
        else lose(name, entry, 'the lease key is gone or held by another host')
      }, function failed (err) {
        debug('%s: renewal failed: %s', name, err.message)
        if (now() - entry.lastOk >= leaseMs - every) lose(name, entry, 'Redis did not answer the renewals')
      })
      // A renewal that neither answers nor times out must not keep the holder past the lease.
      if (now() - entry.lastOk >= leaseMs - every) lose(name, entry, 'no renewal succeeded within the lease')
    }, every)
    entry.timer.unref()
  }

  function lose (name, entry, why) {
    if (entry.lost) return
    entry.lost = true
    debug('%s: lease lost: %s', name, why)
    if (entry.onLost) entry.onLost()
  }

  function drop (name) {
    const entry = kept.get(name)
    if (entry) clearInterval(entry.timer)
    kept.delete(name)
    client.czLeaseDrop(leaseKey(name), hostId).catch((err) => debug('%s: drop failed: %s (the lease expires by itself)', name, err.message))
  }

  function close () {
    for (const name of Array.from(kept.keys())) drop(name)
  }

  return { kind: 'redis', claim, keep, drop, close, validFor, hostId }
}

/** The renewal period, and the time a holder has to stop before the key can expire. */
function marginOf (leaseMs) {
  return Math.max(10, Math.floor(leaseMs / 3))
}

module.exports = { createRedisLeaseBackend }
