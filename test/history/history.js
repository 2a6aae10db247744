'use strict'

/**
 * A history of concurrent operations, as Jepsen records one: every
 * operation is written down when it is invoked and again when it completes,
 * with the time (ms on this process's monotonic clock), the client, the
 * operation, its argument or result and how it ended:
 *
 *   ok       the service answered and the answer says it happened
 *   fail     the service answered and the answer says it did not happen
 *   unknown  no answer (a reset, a timeout, a 5xx): it may or may not have happened
 *
 * Checkers (./checkers.js) read `ops()`: one record per operation,
 * { id, client, op, key, invokedAt, completedAt, status, value }; an
 * operation still open when the history ends counts as unknown.
 */

const { performance } = require('perf_hooks')

const STATUSES = new Set(['ok', 'fail', 'unknown'])

class History {
  constructor () {
    this.records = []
    this.faults = []
  }

  /** @returns {number} the clock the history uses (ms, monotonic) */
  now () {
    return performance.now()
  }

  /**
   * @param {{ client: string, op: string, key?: string, value?: any }} operation
   * @returns {object} the open record; pass it to complete()
   */
  invoke ({ client, op, key, value }) {
    const record = { id: this.records.length, client, op, key: key === undefined ? null : key, invokedAt: this.now(), completedAt: Infinity, status: 'unknown', value: value === undefined ? null : value }
    this.records.push(record)
    return record
  }

  /**
   * @param {object} record what invoke() returned
   * @param {'ok'|'fail'|'unknown'} status
   * @param {any} [value] the result
   */
  complete (record, status, value) {
    if (!STATUSES.has(status)) throw new Error(`status must be ok, fail or unknown, got ${status}`)
    record.completedAt = this.now()
    record.status = status
    if (value !== undefined) record.value = value
    return record
  }

  /** An event that has no duration (a message received, a fenced write seen): invoked and completed at once. */
  event ({ client, op, key, value }) {
    return this.complete(this.invoke({ client, op, key, value }), 'ok')
  }

  /** Record an injected fault: { fault, target, at, ms }. */
  fault (fault, details) {
    const entry = Object.assign({ fault, at: this.now() }, details)
    this.faults.push(entry)
    return entry
  }

  /** @returns {object[]} every operation; open ones stay `unknown` with completedAt Infinity */
  ops () {
    return this.records
  }
}

module.exports = { History }
