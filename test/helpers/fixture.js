'use strict'

/**
 * Used by test fixtures (the primary scripts tests start): tells the test
 * process the port, lifecycle events and results over the fork IPC channel,
 * and takes commands (reload, shutdown) from it.
 */

const cluster = require('cluster')
const fs = require('fs')

/** Descriptors a test asked the primary to hold (cz-test:hoard-fds). */
const hoarded = []

function reportToTest (handle) {
  if (!process.send || !cluster.isPrimary) return handle
  const send = (message) => { if (process.connected) process.send(message) }
  for (const event of ['worker:ready', 'worker:exit', 'crashloop', 'reload:start', 'reload:done', 'scale:done']) {
    handle.on(event, (data) => send({ type: 'cz-test:event', event, data }))
  }
  handle.ready.then(
    (info) => send({ type: 'cz-test:ready', port: info.port, probesPort: info.probesPort, workers: info.workers }),
    (err) => send({ type: 'cz-test:ready-error', message: err.message }))
  process.on('message', (message) => {
    if (!message || typeof message !== 'object') return
    if (message.type === 'cz-test:reload') {
      handle.reload().then((result) => send({ type: 'cz-test:reloaded', id: message.id, result }))
    } else if (message.type === 'cz-test:scale') {
      handle.scale(message.count).then((result) => send({ type: 'cz-test:scaled', id: message.id, result }), (err) => send({ type: 'cz-test:scaled', id: message.id, error: err.message }))
    } else if (message.type === 'cz-test:stats') {
      send({ type: 'cz-test:stats', id: message.id, stats: handle.stats() })
    } else if (message.type === 'cz-test:block') {
      // Hold up the primary's event loop, as a starved machine would.
      const until = Date.now() + message.ms
      while (Date.now() < until) {}
      send({ type: 'cz-test:blocked', id: message.id })
    } else if (message.type === 'cz-test:hoard-fds') {
      // Take every free descriptor, as a leak or a flood would: forks fail with EMFILE until released.
      let count = 0
      for (;;) {
        try { hoarded.push(fs.openSync('/dev/null', 'r')) } catch { break }
        count++
      }
      send({ type: 'cz-test:hoarded', id: message.id, count })
    } else if (message.type === 'cz-test:release-fds') {
      for (const fd of hoarded.splice(0)) fs.closeSync(fd)
      send({ type: 'cz-test:released', id: message.id })
    } else if (message.type === 'cz-test:shutdown') {
      handle.shutdown().then((result) => send({ type: 'cz-test:shutdown-done', result }))
    }
  })
  // If the test process goes away, do not leave a cluster behind.
  process.on('disconnect', () => {
    handle.shutdown().then((result) => process.exit(result.code))
  })
  return handle
}

module.exports = { reportToTest }
