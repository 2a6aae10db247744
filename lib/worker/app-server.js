'use strict'

/**
 * The app's own server on clusterize's port. An app written for one process
 * does `const server = app.listen(PORT)` and, for a graceful stop (PM2's
 * recipe), `process.on('SIGINT', () => server.close(() => process.exit(0)))`.
 * In a worker that server cannot bind the port clusterize already serves;
 * left alone, its close() would call back at once and the app would exit
 * with requests in flight. Instead it stands in for the server clusterize
 * serves: it never binds, reports itself listening on that port, and its
 * close() drains the real one (stop accepting, finish what is in flight)
 * before it calls back, so the recipe works unchanged.
 */

const net = require('net')
const debug = require('debug')('clusterize:worker')

const kStandIn = Symbol('clusterize.standIn')

/**
 * Turn `server` into a stand-in instead of letting it listen.
 * @param {import('net').Server} server the app's server, whose listen() was called
 * @param {IArguments|any[]} args what listen() was called with
 * @param {{ port: number, host?: string, drain: () => Promise<void> }} own clusterize's port,
 *   and what drains the real server (the worker's shutdown)
 * @returns {import('net').Server} the server, as listen() returns it
 */
function standIn (server, args, own) {
  const callback = typeof args[args.length - 1] === 'function' ? args[args.length - 1] : null
  let open = true
  let closing = null
  server[kStandIn] = true
  Object.defineProperty(server, 'listening', { configurable: true, get: () => open })
  server.address = function address () {
    if (!open) return null
    const host = own.host || '::'
    return { address: host, family: net.isIPv6(host) ? 'IPv6' : 'IPv4', port: own.port }
  }
  server.close = function closeDrainsTheRealServer (cb) {
    if (!open) {
      // As net.Server: a second close() calls back with ERR_SERVER_NOT_RUNNING.
      if (typeof cb === 'function') process.nextTick(cb, notRunning())
      return server
    }
    open = false
    if (typeof cb === 'function') server.once('close', () => cb())
    debug('the app closed its server: draining the one clusterize serves')
    closing = Promise.resolve().then(own.drain).catch((err) => debug('drain after the app closed its server: %s', err && err.message))
    closing.then(function closed () {
      // The class's own close() (http.Server's clears its connections check timer), then 'close'.
      Object.getPrototypeOf(server).close.call(server)
    })
    return server
  }
  if (callback) server.once('listening', callback)
  process.nextTick(() => server.emit('listening'))
  return server
}

function notRunning () {
  const err = new Error('Server is not running.')
  err.code = 'ERR_SERVER_NOT_RUNNING'
  return err
}

/** @returns {boolean} whether the app's server is a stand-in */
function isStandIn (server) {
  return Boolean(server && server[kStandIn])
}

module.exports = { standIn, isStandIn }
