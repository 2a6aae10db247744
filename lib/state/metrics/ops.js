'use strict'

/** The app-metrics service's ops, shared by the primary's service and the workers' reporter. */
const OP = Object.freeze({
  /** worker -> primary: `{ seq, metrics }` (seq 0: an interval push) */
  REPORT: 'report',
  /** primary -> worker: report now. `{ seq }` */
  COLLECT: 'collect'
})

/** The service's name in the services layer. */
const SERVICE = 'metrics'

module.exports = { OP, SERVICE }
