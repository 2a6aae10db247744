'use strict'

/**
 * A min-heap of (expiry, session id) pairs in two parallel arrays (no object
 * per entry): the cluster store's sweep and eviction take the session that
 * expires first. Entries may be stale (a session rewritten or removed since);
 * the caller checks them against its map when it pops.
 */
class ExpiryHeap {
  constructor () {
    this.exp = []
    this.ids = []
  }

  get size () {
    return this.exp.length
  }

  /** The earliest expiry (undefined when empty). */
  peekExpires () {
    return this.exp[0]
  }

  push (expires, sid) {
    const exp = this.exp
    const ids = this.ids
    let i = exp.length
    exp.push(expires)
    ids.push(sid)
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (exp[parent] <= expires) break
      exp[i] = exp[parent]
      ids[i] = ids[parent]
      i = parent
    }
    exp[i] = expires
    ids[i] = sid
  }

  /** @returns {[number, string]} the earliest (expires, sid) */
  pop () {
    const exp = this.exp
    const ids = this.ids
    const top = [exp[0], ids[0]]
    const lastExp = exp.pop()
    const lastSid = ids.pop()
    if (exp.length > 0) this.siftDown(0, lastExp, lastSid)
    return top
  }

  siftDown (i, expires, sid) {
    const exp = this.exp
    const ids = this.ids
    const n = exp.length
    for (;;) {
      let child = 2 * i + 1
      if (child >= n) break
      if (child + 1 < n && exp[child + 1] < exp[child]) child++
      if (exp[child] >= expires) break
      exp[i] = exp[child]
      ids[i] = ids[child]
      i = child
    }
    exp[i] = expires
    ids[i] = sid
  }

  /**
   * Rebuild from live entries, dropping stale ones.
   * @param {Iterable<[string, number]>} entries [sid, expires]
   */
  rebuild (entries) {
    const exp = []
    const ids = []
    for (const [sid, expires] of entries) {
      exp.push(expires)
      ids.push(sid)
    }
    this.exp = exp
    this.ids = ids
    for (let i = (exp.length >> 1) - 1; i >= 0; i--) this.siftDown(i, exp[i], ids[i])
  }
}

module.exports = { ExpiryHeap }
