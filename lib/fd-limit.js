'use strict'

/**
 * The process's open-file soft limit, read once, and the idle-connection
 * bound clusterize derives from it. Node raises the soft limit to the hard
 * limit at startup, so what /proc reports here is what this process has.
 */

const fs = require('fs')

/** Where the limit cannot be read (no /proc): the bound a 2048-descriptor process would get. */
const UNKNOWN_LIMIT_IDLE = 1024
/** Never below this: a process with a tiny limit still keeps a few keep-alive clients. */
const MIN_IDLE = 16

let cached

/**
 * @param {string} [text] the contents of /proc/self/limits (read when omitted)
 * @returns {number|null} the soft limit on open files, or null when unknown or unlimited
 */
function fdSoftLimit (text) {
  if (text === undefined) {
    if (cached !== undefined) return cached
    try {
      text = fs.readFileSync('/proc/self/limits', 'latin1')
    } catch {
      cached = null
      return cached
    }
    cached = parseSoftLimit(text)
    return cached
  }
  return parseSoftLimit(text)
}

function parseSoftLimit (text) {
  const line = /^Max open files\s+(\S+)\s+(\S+)/m.exec(text)
  if (line === null || !/^\d+$/.test(line[1])) return null
  return Number(line[1])
}

/**
 * The default `maxIdleConnections`: half the open-file soft limit, so idle
 * sockets alone can never take the descriptors that requests in flight,
 * files, Redis and IPC need.
 * @param {number|null} [limit] defaults to this process's soft limit
 * @returns {number}
 */
function defaultMaxIdleConnections (limit) {
  if (limit === undefined) limit = fdSoftLimit()
  if (limit === null) return UNKNOWN_LIMIT_IDLE
  return Math.max(MIN_IDLE, Math.floor(limit / 2))
}

/**
 * How many descriptors this process has open now (a read of /proc/self/fd).
 * @returns {number|null} null where it cannot be read (no /proc, or out of descriptors to read it)
 */
function openDescriptors () {
  try {
    return fs.readdirSync('/proc/self/fd').length
  } catch (err) {
    // Out of descriptors to even open the directory: as near the limit as it gets.
    if (err.code === 'EMFILE' || err.code === 'ENFILE') return Infinity
    return null
  }
}

/** How long a descriptor count is reused: reading /proc/self/fd costs a directory read. */
const COUNT_TTL_MS = 250

/**
 * The descriptors a process keeps for itself: forking a worker takes a few
 * (its IPC channel, its stdio), each app connection on its way to a worker one.
 * @param {number|null} limit the open-file soft limit
 * @returns {number} an eighth of it, at least 32 (0 when the limit is unknown)
 */
function descriptorReserve (limit) {
  return limit === null ? 0 : Math.max(32, Math.floor(limit / 8))
}

/**
 * A check of whether this process is within its reserve of the open-file limit, counting its
 * open descriptors at most every COUNT_TTL_MS.
 * @param {{ limit?: number|null, count?: () => number|null }} [options] this process's by default (for tests)
 * @returns {{ limit: number|null, reserve: number, low: () => boolean }}
 */
function createDescriptorReserve (options) {
  const limit = options && options.limit !== undefined ? options.limit : fdSoftLimit()
  const count = (options && options.count) || openDescriptors
  const reserve = descriptorReserve(limit)
  let counted = { at: 0, open: null }
  return {
    limit,
    reserve,
    /** @returns {boolean} true when fewer than `reserve` descriptors are left */
    low () {
      if (limit === null) return false
      const now = Date.now()
      if (now - counted.at > COUNT_TTL_MS) counted = { at: now, open: count() }
      return counted.open !== null && counted.open >= limit - reserve
    }
  }
}

module.exports = { fdSoftLimit, defaultMaxIdleConnections, openDescriptors, descriptorReserve, createDescriptorReserve }
