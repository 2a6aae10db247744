'use strict'

/**
 * Control of cluster workers forked by a bench script (the bus benches): the
 * pids it forked, killed by PID when the script exits, however it exits.
 */

/** Pids of the workers a bench script forked and has not seen exit. */
const pids = new Set()

/** SIGKILL every forked worker still recorded. */
function killForked () {
  for (const pid of pids) {
    try { process.kill(pid, 'SIGKILL') } catch {}
  }
  pids.clear()
}
process.on('exit', killForked)

/**
 * Ask each worker to exit ({ type: 'ctl', cmd: 'exit' }); SIGKILL it by PID after 2 s.
 * @param {import('cluster').Worker[]} forked
 */
function stopForked (forked) {
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

/**
 * In a forked bench worker: clusterize's bus, wired with the hooks the
 * runtime itself uses (lib/bus), not a copy; `onTick` gets every `topic` message.
 * @returns {import('../../lib/bus').bus}
 */
function wireBusWorker (id, topic, onTick) {
  const ipc = require('../../lib/ipc')
  const { busRuntime, bus } = require('../../lib/bus')
  const channel = new ipc.Channel(process)
  busRuntime.configure({ serialization: 'json' }, { role: 'worker' })
  busRuntime.attachToPrimary({ channel, id, generation: 1 })
  ipc.listen(process, (message) => { if (message.kind === 'bus') busRuntime.onPrimaryMessage(message) })
  bus.on(topic, (data) => onTick(data))
  return bus
}

module.exports = { pids, killForked, stopForked, waitCtl, wireBusWorker }
