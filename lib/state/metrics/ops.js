'use strict'

/** The app-metrics service's name in the service layer and its methods. */
const SERVICE = 'metrics'

const OP = Object.freeze({
  /** Notification, worker -> primary: `{ seq, metrics }` (seq 0: an interval push). */
  REPORT: 'report',
  /** Request, worker -> primary, held until a scrape wants fresh values: answers `{ seq }` (0: ask again). */
  NEXT: 'next'
})

/** A waiting OP.NEXT is answered "ask again" after this long, well inside the worker's own timeout. */
const HOLD_MS = 20000

module.exports = { OP, SERVICE, HOLD_MS }
