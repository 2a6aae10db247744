'use strict'

/**
 * Build an Express app's req and res on its own prototypes from the start.
 *
 * Express gives every request its methods by swapping prototypes:
 * `Object.setPrototypeOf(req, app.request)` and the same for res, in
 * app.handle (express 5) or the init middleware (express 4). V8 before 13.6
 * (Node 23 and older) takes every object whose prototype was swapped off its
 * fast paths: on Node 20 and 22 the same hello-world Express app serves about
 * a third of the requests a second that it serves on Node 24
 * (bench/express-prototypes.js; expressjs/express#5998, nodejs/node#37457).
 *
 * http.createServer's public IncomingMessage and ServerResponse options let
 * the server construct req and res with app.request and app.response as their
 * prototypes already; Express's swap then finds the prototype it wants and
 * changes nothing (OrdinarySetPrototypeOf returns early on the same value).
 * Express still makes the swap, so a sub-app, or an app whose app.request is
 * replaced later, gets what it always got.
 *
 * On V8 13.6 and later the swap is fast, and a constructor of ours is slower
 * than Node's own (bench/express-prototypes.js), so there we leave the server
 * as it is.
 */

const http = require('http')
const debug = require('debug')('clusterize:worker')

/** The first V8 whose prototype swap no longer slows Express down (Node 24). */
const FAST_SWAP_V8 = [13, 6]

/**
 * Does this V8 slow down objects whose prototype was swapped?
 * @param {string} [v8Version] defaults to this process's
 * @returns {boolean}
 */
function slowPrototypeSwap (v8Version = process.versions.v8) {
  const [major, minor] = v8Version.split('.').map(Number)
  return major < FAST_SWAP_V8[0] || (major === FAST_SWAP_V8[0] && minor < FAST_SWAP_V8[1])
}

/**
 * http.createServer options that construct req and res on the app's own
 * prototypes, or null when they would not help (a fast V8, or an app without
 * Express's request and response prototypes).
 * @param {Function} app the listener the server will call
 * @param {{ force?: boolean }} [options] force: whatever the V8 (tests, benchmarks)
 * @returns {{ IncomingMessage: Function, ServerResponse: Function } | null}
 */
function expressServerOptions (app, options = {}) {
  if (!options.force && !slowPrototypeSwap()) return null
  const request = app && app.request
  const response = app && app.response
  if (!isPrototypeFrom(request, http.IncomingMessage) || !isPrototypeFrom(response, http.ServerResponse)) return null
  // Our constructors call Node's as plain functions; should a Node line make them classes, that
  // call would throw on every request, so the server keeps Node's own instead.
  if (!callableConstructor(http.IncomingMessage) || !callableConstructor(http.ServerResponse)) {
    debug('IncomingMessage or ServerResponse is a class here: Node\'s own kept')
    return null
  }

  function ExpressIncomingMessage (socket) {
    http.IncomingMessage.call(this, socket)
  }
  ExpressIncomingMessage.prototype = request

  function ExpressServerResponse (req, serverOptions) {
    http.ServerResponse.call(this, req, serverOptions)
  }
  ExpressServerResponse.prototype = response

  debug('req and res built on the app\'s prototypes (V8 %s)', process.versions.v8)
  return { IncomingMessage: ExpressIncomingMessage, ServerResponse: ExpressServerResponse }
}

/**
 * Can `fn` be called with `.call(this, ...)` (a function constructor, not a class)?
 * @param {Function} fn
 * @returns {boolean}
 */
function callableConstructor (fn) {
  return typeof fn === 'function' && !/^class\b/.test(Function.prototype.toString.call(fn))
}

function isPrototypeFrom (value, Base) {
  return value !== null && typeof value === 'object' && Base.prototype.isPrototypeOf(value)
}

module.exports = { expressServerOptions, slowPrototypeSwap, callableConstructor }
