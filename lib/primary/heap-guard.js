'use strict'

/**
 * The heap guard: from a worker's heartbeats, decide whether its V8 heap
 * will run out before long. V8 aborts a process (SIGABRT) when its old
 * generation is full; heapUsed / heap_size_limit then stands at only 0.83
 * with a 256 MB heap (the limit includes the young generation's reserve),
 * so the ratio is taken of what the old generation may hold (heapOldLimit).
 * A fast leak crosses a small heap between a handful of heartbeats, so a
 * heap that keeps growing fast enough to pass the ratio within three
 * heartbeats counts too.
 */

const MB = 1024 * 1024
/** Heartbeats ahead that the growth test looks. */
const HORIZON_BEATS = 3

/**
 * @param {{ maxHeapRatio: number, heartbeatMs: number }} health resolved health options
 * @returns {(record: object, figures: object, at: number) => string|null} what is wrong with the heap, or null
 */
function createHeapGuard (health) {
  const { maxHeapRatio, heartbeatMs } = health
  /** Per worker: its last heap figure, when it came, and the growth rate up to it. */
  const trend = new WeakMap()
  const horizonMs = HORIZON_BEATS * heartbeatMs

  /**
   * The growth test needs two intervals of growth in a row and a heap at
   * least half full, so that a burst of garbage between two collections does
   * not recycle a healthy worker.
   */
  return function judgeHeap (record, figures, at) {
    if (!(maxHeapRatio > 0 && maxHeapRatio < 1) || typeof figures.heapUsed !== 'number') return null
    const limit = figures.heapOldLimit || figures.heapLimit
    if (!(limit > 0)) return null
    const used = figures.heapUsed
    const ceiling = limit * maxHeapRatio
    const previous = trend.get(record)
    const latest = previous && at > previous.at ? (used - previous.used) / (at - previous.at) : 0
    const sustained = previous ? Math.min(latest, previous.rate) : 0
    trend.set(record, { at, used, rate: latest })
    const percent = (bytes) => Math.round(100 * bytes / limit)
    if (used > ceiling) {
      return `heap at ${percent(used)}% of its limit (${Math.round(limit / MB)} MB; max ${percent(ceiling)}%)`
    }
    if (sustained > 0 && used > limit / 2 && used + sustained * horizonMs > ceiling) {
      return `heap grows ${Math.round(sustained * 1000 / MB)} MB/s, at ${percent(used)}% of its limit (${Math.round(limit / MB)} MB): it would pass ${percent(ceiling)}% within ${horizonMs} ms`
    }
    return null
  }
}

module.exports = { createHeapGuard }
