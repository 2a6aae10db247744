'use strict'

/**
 * What a worker and single-process mode share: build the server from the
 * user's app, and drain it on shutdown.
 */

const net = require('net')
const { loadApp } = require('./load-app')
const { trackConnections } = require('./connections')
const poolRegistry = require('../pool/registry')
const { runDrainHooks, runConnectionsClosedHooks } = require('./drain-hooks')
const { watchListenCalls } = require('./pitfalls')
const { closeEngines } = require('../realtime/engines')

/**
 * Build the user's app into a configured, tracked, not yet listening server.
 * @param {Function|string} createApp
 * @param {object} config resolved configuration
 * @param {{ port?: number, onPortClash?: (port: number) => void }} [own] the port clusterize
 *   serves, and what to do when the app's own listen() on it fails (see watchListenCalls)
 * @returns {Promise<{ app: Function|null, server: import('http').Server, tracker: object, listenedByApp: boolean }>}
 *   `listenedByApp`: the app called listen() itself while it was built
 */
async function prepareServer (createApp, config, own) {
  const { value: { app, server }, listened } = await watchListenCalls(() => loadApp(createApp), own)
  // Load balancers keep idle connections for 60 s; a server that closes first causes 502s.
  server.keepAliveTimeout = config.keepAliveTimeout
  server.headersTimeout = config.headersTimeout
  return { app, server, tracker: trackConnections(server), listenedByApp: listened }
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
