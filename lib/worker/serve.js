'use strict'

/**
 * What a worker and single-process mode share: build the server from the
 * user's app, and drain it on shutdown.
 */

const http = require('http')
const net = require('net')
const debug = require('debug')('clusterize:timeouts')
const { loadApp } = require('./load-app')
const { trackConnections } = require('./connections')
const { enforceServerTimeouts } = require('./server-timeouts')
const poolRegistry = require('../pool/registry')
const { runDrainHooks, runConnectionsClosedHooks } = require('../lifecycle')
const { watchListenCalls } = require('./pitfalls')
const { closeEngines } = require('../realtime/engines')

/** The server timeouts clusterize has options for. */
const SERVER_TIMEOUTS = ['keepAliveTimeout', 'headersTimeout']
let nodeDefaults = null

/**
 * Build the user's app into a configured, tracked, not yet listening server.
 * @param {Function|string} createApp
 * @param {object} config resolved configuration
 * @param {{ port?: number, host?: string, onOwnPort?: (port: number) => void, drain?: () => Promise<void>, log?: object }} [own]
 *   the port clusterize serves, what to tell and what drains it when the app's own listen() is on it
 *   (see watchListenCalls), and the logger
 * @returns {Promise<{ app: Function|null, server: import('http').Server, tracker: object, listenedByApp: boolean }>}
 *   `listenedByApp`: the app called listen() itself, on another port, while it was built
 */
async function prepareServer (createApp, config, own) {
  const { value: { app, server }, listened } = await watchListenCalls(() => loadApp(createApp), own)
  applyServerTimeouts(server, config)
  // Before any connection: handed-off connections reach a server that never listens (see ./server-timeouts.js).
  enforceServerTimeouts(server)
  const tracker = trackConnections(server, { maxIdle: config.maxIdleConnections, slowBody: config.slowBody, log: own && own.log })
  return { app, server, tracker, listenedByApp: listened }
}

/**
 * Load balancers keep idle connections for 60 s; a server that closes first
 * causes 502s, hence clusterize's defaults. A timeout the app set on its own
 * server (it differs from Node's default) is the app's choice and stays,
 * unless the clusterize option was given explicitly.
 */
function applyServerTimeouts (server, config) {
  if (nodeDefaults === null) nodeDefaults = new http.Server()
  const explicit = config.explicitServerTimeouts || SERVER_TIMEOUTS
  for (const name of SERVER_TIMEOUTS) {
    const setByApp = typeof server[name] === 'number' && server[name] !== nodeDefaults[name]
    if (setByApp && !explicit.includes(name)) {
      debug('keeping the app\'s %s = %d', name, server[name])
      continue
    }
    server[name] = config[name]
  }
}

/**
 * Stop accepting, run the app's onDrain hooks, let in-flight requests,
 * WebSockets and offload tasks finish, and destroy what is left at the deadline.
 * @param {{ server: object|null, tracker: object|null, listening: boolean, log?: object }} target
 * @param {number} timeoutMs
 * @param {string} [reason] why: 'reload', 'memory', 'shutdown', 'primary-gone'
 * @returns {Promise<boolean>} true when the deadline passed first
 */
async function drainServer (target, timeoutMs, reason) {
  const deadline = Date.now() + timeoutMs
  if (target.server && target.listening) stopListening(target.server)
  await runDrainHooks({ reason: reason || 'shutdown', deadline }, target.log)
  const remaining = Math.max(0, deadline - Date.now())
  const drained = target.tracker ? target.tracker.drain({ reason, graceMs: remaining }) : null
  // After the WebSockets got their close code from the tracker: socket.io's
  // long-polling GETs are in-flight requests that only engine.io can end.
  closeEngines()
  const timedOut = drained !== null ? await raceDeadline(drained, remaining) : false
  if (timedOut) target.tracker.destroyAll()
  await runConnectionsClosedHooks({ reason: reason || 'shutdown', deadline }, target.log)
  await poolRegistry.closeAll({ timeoutMs: Math.max(0, deadline - Date.now()) }).catch(() => {})
  return timedOut
}

/**
 * Close the listening socket only. http.Server#close() (Node >= 19) also
 * closes idle keep-alive sockets at once, which races with clients already
 * sending on them; the connection tracker drains those instead.
 */
function stopListening (server) {
  net.Server.prototype.close.call(server)
}

/** Resolve true if the deadline passed first. */
function raceDeadline (promise, timeoutMs) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(true), timeoutMs)
    timer.unref()
    promise.then(() => {
      clearTimeout(timer)
      resolve(false)
    })
  })
}

module.exports = { prepareServer, drainServer }
