'use strict'

/**
 * Driving test/fixtures/bus-cluster.js from a test: `run(target, action, args)`
 * asks the primary ('primary') or a worker (its slot) to do one action and
 * resolves with its result; `run.note(predicate)` resolves with the first
 * note a process sends that matches.
 */

const path = require('path')

const BUS_FIXTURE = path.join(__dirname, '..', 'fixtures', 'bus-cluster.js')

/**
 * @param {{ command: Function, child: import('child_process').ChildProcess }} cluster from helpers/cluster's startCluster(BUS_FIXTURE)
 * @param {number} [timeoutMs] per action (60 s)
 */
function busDriver (cluster, timeoutMs = 60000) {
  const run = async (target, action, args) => {
    const reply = await cluster.command({ type: 'bus-test:do', target, action, args }, 'bus-test:reply', timeoutMs)
    if (reply.error) throw new Error(`${action} on ${target} failed: ${reply.error.message}`)
    return reply.result
  }
  run.note = (predicate) => new Promise((resolve) => {
    cluster.child.on('message', function onNote (message) {
      if (message && message.type === 'bus-test:note' && predicate(message.data)) {
        cluster.child.removeListener('message', onNote)
        resolve(message.data)
      }
    })
  })
  return run
}

module.exports = { BUS_FIXTURE, busDriver }
