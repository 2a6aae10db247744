'use strict'

/**
 * The primary the history checker starts (and `clusterize upgrade` starts
 * again, with the same argv and environment). CZ_HISTORY (JSON):
 * { port, workers, leaseMs, sessionStore: 'cluster'|'redis', redisUrl,
 *   redisPrefix, busRedis, rateLimit: { limit, windowMs }, singleton,
 *   singletonLeaseMs, bus, socketio, collector }.
 * Its bus handler 'history:block' busy-waits: an app's handler that blocks
 * the primary's event loop.
 */

const { clusterize, bus } = require('../..')
const createApp = require('./app')

const options = JSON.parse(process.env.CZ_HISTORY || '{}')

const clusterOptions = {
  port: options.port,
  host: '127.0.0.1',
  workers: options.workers || 2,
  clusterStore: { leaseMs: options.leaseMs === undefined ? 1000 : options.leaseMs },
  reload: { bakeMs: 0 },
  probes: { port: 0 },
  logger: quietLogger()
}
if (options.busRedis) clusterOptions.bus = { redis: options.busRedis }
// Senders go as fast as acks come back: more than the default 10,000 packets may pass while a
// client reconnects, and it would then connect as a new socket, by design (not what is checked here).
if (options.socketio) clusterOptions.recovery = { maxPackets: 200000 }

if (require('cluster').isPrimary) {
  bus.handle('history:block', function blockTheLoop (ms) {
    const until = Date.now() + ms
    while (Date.now() < until) {}
    return ms
  })
}

const handle = clusterize(createApp, clusterOptions)
if (require('cluster').isPrimary) {
  handle.ready.then(
    (info) => console.log(JSON.stringify({ historyReady: true, pid: process.pid, port: info.port, probesPort: info.probesPort })),
    (err) => { console.error('history primary failed: ' + err.message); process.exit(1) })
}

/** Warnings and errors only: a fault schedule makes the info lines many. */
function quietLogger () {
  const line = (level) => (msg, fields) => console.error(`[${level}] ${msg}${fields ? ' ' + JSON.stringify(fields) : ''}`)
  return { debug () {}, info () {}, warn: line('warn'), error: line('error') }
}
