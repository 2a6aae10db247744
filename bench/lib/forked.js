'use strict'

/** Control of cluster workers forked by a bench script (the bus benches). */

/**
 * Ask each worker to exit ({ type: 'ctl', cmd: 'exit' }); SIGKILL it by PID after 2 s.
 * @param {import('cluster').Worker[]} forked
 * @param {Set<number>} pids the script's record of live pids (each one is removed)
 */
function stopForked (forked, pids) {
  return Promise.all(forked.map((worker) => new Promise((resolve) => {
    const timer = setTimeout(() => { try { process.kill(worker.process.pid, 'SIGKILL') } catch { resolve() } }, 2000)
    worker.once('exit', () => { clearTimeout(timer); resolve() })
    worker.send({ type: 'ctl', cmd: 'exit' })
  }).then(() => pids.delete(worker.process.pid))))
}

/** Resolve with the first { type: 'ctl' } message from `worker` that matches `predicate`. */
function waitCtl (worker, predicate) {
  return new Promise((resolve) => {
    worker.on('message', function onCtl (message) {
      if (message && message.type === 'ctl' && predicate(message)) {
        worker.removeListener('message', onCtl)
        resolve(message)
      }
    })
  })
}

module.exports = { stopForked, waitCtl }
