'use strict'

/**
 * The lease backend of one host: this primary alone decides, so every claim
 * succeeds. Tokens start from the clock (epoch ms) and grow by at least one
 * per holder, so they keep growing across a restart of the primary too.
 */

function createLocalLeaseBackend (now) {
  now = now || Date.now
  let last = 0
  return {
    kind: 'local',
    claim () {
      last = Math.max(last + 1, now())
      return Promise.resolve(last)
    },
    /** A token handed over from another primary (an upgrade): the next ones are larger. */
    advance (token) {
      if (Number.isSafeInteger(token) && token > last) last = token
    },
    keep () {},
    /** This primary alone hands names out: a holder keeps one until this primary says otherwise. */
    validFor () { return null },
    drop () {},
    close () {}
  }
}

module.exports = { createLocalLeaseBackend }
