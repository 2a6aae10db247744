'use strict'

/**
 * Watches the workers of the generation a reload is rolling out, from its
 * canary's start until the reload commits. The first sign that the new code
 * is failing ends the watch with a reason: one of its workers exits by itself
 * (crash, boot failure, hang kill), goes silent for longer than
 * `reload.heartbeatTimeoutMs`, or is reported unhealthy (the memory guard).
 *
 * A canary that exits shortly after its bake, or hangs, is caught here; the
 * bake window alone only saw exits, and the hang detector's 10 s is longer
 * than the default bake.
 *
 * Silence is only judged after `reload.heartbeatTimeoutMs`, so a hang that
 * starts in the last moments of a bake would still look healthy when it ends.
 * confirm() closes that gap: at the end of each bake every new worker must
 * answer a question asked then, a round trip its event loop has to make after
 * the bake; a worker that does not answer within the timeout fails the rollout.
 */

const debug = require('debug')('clusterize:reload')
const { describeExit } = require('./readiness')
const { isFailureReason } = require('./worker-record')

/**
 * @param {import('./supervisor').Supervisor} supervisor emits 'record:exit' and 'record:heartbeat'
 * @param {number} generation the generation being rolled out
 * @param {number} heartbeatTimeoutMs silence that fails the rollout
 * @returns {{ failure: string|null, failed: Promise<string>, fail: (reason: string) => void, checkBeats: () => void, confirm: () => Promise<void>, stop: () => void }}
 */
function watchRollout (supervisor, generation, heartbeatTimeoutMs) {
  let resolveFailed
  const watch = {
    /** The first failure, or null while the new code looks healthy. */
    failure: null,
    /** Resolves with the first failure (never rejects). */
    failed: new Promise((resolve) => { resolveFailed = resolve }),
    fail,
    checkBeats,
    confirm,
    stop
  }

  function fail (reason) {
    if (watch.failure) return
    watch.failure = reason
    debug('generation %d fails: %s', generation, reason)
    resolveFailed(reason)
  }

  function onExit (record, event) {
    if (record.generation === generation && !record.spare && isFailureReason(event.reason)) fail(describeExit(record, event))
  }

  /** A ready worker of the new generation silent for too long is failing, even before the hang detector kills it. */
  function checkBeats () {
    const now = Date.now()
    for (const record of supervisor.liveRecords()) {
      if (record.generation !== generation || record.spare || !record.isReady()) continue
      const silentMs = now - (record.heartbeatAt || record.readyAt)
      if (silentMs > heartbeatTimeoutMs) {
        fail(`worker ${record.id} (generation ${generation}) sent no heartbeat for ${silentMs} ms (reload.heartbeatTimeoutMs is ${heartbeatTimeoutMs}): it hangs`)
      }
    }
  }

  /**
   * Ask every ready worker of the generation to answer now, and wait for every answer; one
   * that stays unanswered for heartbeatTimeoutMs (counted on ticks that ran on time, as
   * checkBeats' silence is) fails the rollout: it hangs. Resolves once all answered, the
   * asked ones exited, or the rollout failed.
   */
  function confirm () {
    const asked = new Map()
    for (const record of supervisor.liveRecords()) {
      if (record.generation !== generation || record.spare || !record.isReady()) continue
      asked.set(record, supervisor.askAlive(record))
    }
    if (asked.size === 0 || watch.failure) return Promise.resolve()
    return new Promise((resolve) => {
      const tickMs = Math.max(50, Math.floor(heartbeatTimeoutMs / 8))
      let waitedMs = 0
      let lastTickAt = Date.now()
      const settle = (record) => {
        asked.delete(record)
        if (asked.size === 0) done()
      }
      const onAlive = (record) => { if (asked.has(record) && record.aliveAnswered >= asked.get(record)) settle(record) }
      // An exit that is a failure fails the watch (onExit); any other leaves nothing to ask.
      const onGone = (record) => { if (asked.has(record)) settle(record) }
      const timer = setInterval(function tick () {
        const now = Date.now()
        const sinceLast = now - lastTickAt
        lastTickAt = now
        // A late tick: the primary was held up, and answers may be waiting unread in its pipes.
        if (sinceLast > 2 * tickMs) return
        waitedMs += sinceLast
        if (waitedMs <= heartbeatTimeoutMs) return
        const [record] = asked.keys()
        fail(`worker ${record.id} (generation ${generation}) did not answer within ${waitedMs} ms at the end of the bake (reload.heartbeatTimeoutMs is ${heartbeatTimeoutMs}): it hangs`)
        done()
      }, tickMs)
      function done () {
        clearInterval(timer)
        supervisor.removeListener('record:alive', onAlive)
        supervisor.removeListener('record:exit', onGone)
        resolve()
      }
      supervisor.on('record:alive', onAlive)
      supervisor.on('record:exit', onGone)
      watch.failed.then(done)
    })
  }

  supervisor.on('record:exit', onExit)
  // Checked at a quarter of the timeout: a hang is seen at most 1.25 timeouts after the last beat.
  const intervalMs = Math.max(50, Math.floor(heartbeatTimeoutMs / 4))
  let lastTickAt = Date.now()
  const timer = setInterval(function tick () {
    const now = Date.now()
    const late = now - lastTickAt > 2 * intervalMs
    lastTickAt = now
    // The primary itself was held up (a loaded machine): heartbeats may be waiting unread in
    // the IPC pipes, and timers run before I/O. Judge them next round, not as silence.
    if (!late) checkBeats()
  }, intervalMs)
  timer.unref()

  function stop () {
    clearInterval(timer)
    supervisor.removeListener('record:exit', onExit)
  }

  return watch
}

module.exports = { watchRollout }
