'use strict'

/**
 * Checkers: pure functions from a history's operations (./history.js) to a
 * list of anomalies, one object each with a `kind` and what shows it. An
 * empty list is a pass. Each checks what its service promises:
 *
 * - checkCounter: a session's counter, read and incremented (read-modify-write)
 *   by concurrent clients on any worker, is linearizable. Checked through what
 *   linearizability implies for a counter, in O(n log n): no two acknowledged
 *   increments return the same value; every operation invoked after an
 *   acknowledged operation completed sees at least its value (an increment:
 *   more than it); no operation sees a value larger than the number of
 *   increments invoked before it completed. Operations whose outcome is unknown
 *   may or may not have happened: they raise the upper bound, never the lower.
 * - checkRateLimit: at most `limit` requests admitted per key (each key is
 *   one window: the harness uses a fresh key per window).
 * - checkSingleton: never two holders: the writes a fenced downstream saw,
 *   grouped by fencing token, cover disjoint spans of time, in token order.
 * - checkOrder: per sender, each receiver gets the sequence numbers in order,
 *   each once, with no gap.
 */

/**
 * @param {object[]} ops records with op 'incr' (value: the counter after it) or 'read' (value: the counter), `key` the session
 * @returns {object[]} anomalies: duplicate-increment, lost-update (a value below what an earlier acknowledged operation saw), value-from-nowhere
 */
function checkCounter (ops) {
  const anomalies = []
  for (const [key, list] of groupBy(ops.filter((o) => o.op === 'incr' || o.op === 'read'), (o) => o.key)) {
    const ok = list.filter((o) => o.status === 'ok')
    const seen = new Map()
    for (const o of ok) {
      if (o.op !== 'incr') continue
      const earlier = seen.get(o.value)
      if (earlier) anomalies.push({ kind: 'duplicate-increment', key, value: o.value, ops: [earlier.id, o.id], clients: [earlier.client, o.client] })
      else seen.set(o.value, o)
    }
    // Lower bound: the largest value an acknowledged operation saw, by completion time.
    const byCompletion = ok.slice().sort((a, b) => a.completedAt - b.completedAt)
    const floor = []
    let max = -Infinity
    let maxOp = null
    for (const o of byCompletion) {
      if (o.value > max) { max = o.value; maxOp = o }
      floor.push({ at: o.completedAt, value: max, op: maxOp })
    }
    // Upper bound: increments (not refused) invoked before an operation completed.
    const incrInvocations = list.filter((o) => o.op === 'incr' && o.status !== 'fail').map((o) => o.invokedAt).sort((a, b) => a - b)
    for (const o of ok) {
      const before = lastBefore(floor, o.invokedAt)
      if (before && (o.op === 'incr' ? o.value <= before.value : o.value < before.value)) {
        anomalies.push({ kind: 'lost-update', key, op: o.op, id: o.id, client: o.client, at: o.invokedAt, value: o.value, expectedAtLeast: o.op === 'incr' ? before.value + 1 : before.value, after: { id: before.op.id, client: before.op.client, op: before.op.op, value: before.value }, lost: before.value - o.value + (o.op === 'incr' ? 1 : 0) })
      }
      const possible = countBefore(incrInvocations, o.completedAt)
      if (o.value > possible) anomalies.push({ kind: 'value-from-nowhere', key, op: o.op, id: o.id, client: o.client, value: o.value, increments: possible })
    }
  }
  return anomalies
}

/**
 * @param {object[]} ops records with op 'hit': status ok (admitted), fail (refused, 429) or unknown; `key` the window
 * @param {{ limit: number }} options
 * @returns {object[]} anomalies: over-limit
 */
function checkRateLimit (ops, { limit }) {
  const anomalies = []
  for (const [key, list] of groupBy(ops.filter((o) => o.op === 'hit'), (o) => o.key)) {
    const admitted = list.filter((o) => o.status === 'ok').length
    if (admitted > limit) anomalies.push({ kind: 'over-limit', key, admitted, limit, refused: list.filter((o) => o.status === 'fail').length })
  }
  return anomalies
}

/**
 * @param {object[]} ops records with op 'write' (value: { token, pid }) as the fenced downstream received them
 * @returns {object[]} anomalies: two-holders (tokens whose spans of writes overlap: when the newer began, the overlap
 *   in ms and the stale writes a fencing downstream would have refused), token-shared (one token, two processes)
 */
function checkSingleton (ops) {
  const anomalies = []
  const spans = new Map()
  for (const o of ops) {
    if (o.op !== 'write' || o.status !== 'ok') continue
    const { token, pid } = o.value
    const span = spans.get(token)
    if (!span) {
      spans.set(token, { token, pid, first: o.invokedAt, last: o.invokedAt, writes: [o.invokedAt] })
      continue
    }
    if (span.pid !== pid && !span.shared) {
      span.shared = true
      anomalies.push({ kind: 'token-shared', token, pids: [span.pid, pid] })
    }
    span.first = Math.min(span.first, o.invokedAt)
    span.last = Math.max(span.last, o.invokedAt)
    span.writes.push(o.invokedAt)
  }
  const ordered = [...spans.values()].sort((a, b) => a.token - b.token)
  for (let i = 0; i < ordered.length; i++) {
    for (let j = i + 1; j < ordered.length; j++) {
      const older = ordered[i]
      const newer = ordered[j]
      if (older.last > newer.first) {
        anomalies.push({
          kind: 'two-holders',
          tokens: [older.token, newer.token],
          pids: [older.pid, newer.pid],
          at: newer.first,
          overlapMs: Math.round(older.last - newer.first),
          staleWrites: older.writes.filter((t) => t > newer.first).length
        })
      }
    }
  }
  return anomalies
}

/**
 * @param {object[]} ops records with op 'receive': client the receiver, value { sender, seq }, in the order received;
 *   and, with `acknowledgedOnly`, op 'send' (value { sender, seq }) for what the senders sent
 * @param {{ acknowledgedOnly?: boolean }} [options] a gap counts only the numbers whose send was acknowledged
 *   (ok): one the sender never got an answer for may have been lost before it was sent
 * @returns {object[]} anomalies: reorder, duplicate, missing (a gap: `count` numbers never received before a later one)
 */
function checkOrder (ops, { acknowledgedOnly = false } = {}) {
  const acknowledged = new Set()
  if (acknowledgedOnly) {
    for (const o of ops) if (o.op === 'send' && o.status === 'ok') acknowledged.add(o.value.sender + '\u0000' + o.value.seq)
  }
  // What a gap [from, to) is still missing at the end: a number received later (a reorder) is reported as that.
  const stillMissing = ({ sender, from, to, stream }) => {
    let count = 0
    for (let seq = from; seq < to; seq++) {
      if (!stream.seen.has(seq) && (!acknowledgedOnly || acknowledged.has(sender + '\u0000' + seq))) count++
    }
    return count
  }
  const anomalies = []
  const streams = new Map()
  const gaps = []
  for (const o of ops) {
    if (o.op !== 'receive' || o.status !== 'ok') continue
    const { sender, seq } = o.value
    const id = o.client + '\u0000' + sender
    let stream = streams.get(id)
    if (!stream) {
      stream = { last: seq, seen: new Set([seq]) }
      streams.set(id, stream)
      continue
    }
    if (stream.seen.has(seq)) {
      anomalies.push({ kind: 'duplicate', receiver: o.client, sender, seq })
      continue
    }
    stream.seen.add(seq)
    if (seq < stream.last) {
      anomalies.push({ kind: 'reorder', receiver: o.client, sender, seq, after: stream.last })
      continue
    }
    if (seq > stream.last + 1) gaps.push({ receiver: o.client, sender, from: stream.last + 1, to: seq, stream })
    stream.last = seq
  }
  for (const gap of gaps) {
    const count = stillMissing(gap)
    if (count > 0) anomalies.push({ kind: 'missing', receiver: gap.receiver, sender: gap.sender, from: gap.from, count })
  }
  return anomalies
}

function groupBy (list, keyOf) {
  const groups = new Map()
  for (const item of list) {
    const key = keyOf(item)
    if (!groups.has(key)) groups.set(key, [])
    groups.get(key).push(item)
  }
  return groups
}

/** The last entry of `sorted` (by .at) with at < t, or null. */
function lastBefore (sorted, t) {
  let lo = 0
  let hi = sorted.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (sorted[mid].at < t) lo = mid + 1
    else hi = mid
  }
  return lo === 0 ? null : sorted[lo - 1]
}

/** How many of the sorted numbers are < t. */
function countBefore (sorted, t) {
  let lo = 0
  let hi = sorted.length
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (sorted[mid] < t) lo = mid + 1
    else hi = mid
  }
  return lo
}

module.exports = { checkCounter, checkRateLimit, checkSingleton, checkOrder }
