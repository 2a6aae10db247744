'use strict'

const http = require('http')
const net = require('net')
const path = require('path')
const { ClusterizeAppError } = require('../errors')
const { expressServerOptions } = require('./express-prototypes')

/**
 * Resolve the user's `createApp` into an http.Server that is not yet listening.
 * Accepts a factory (sync or async) returning an Express app, a `(req, res)`
 * listener or an http.Server; or a module path exporting any of those.
 *
 * @param {Function|string} createApp
 * @returns {Promise<{ app: Function|null, server: import('http').Server }>}
 */
async function loadApp (createApp) {
  let value = createApp
  if (typeof createApp === 'string') {
    value = unwrapModule(requireApp(path.resolve(createApp)))
    // A module may export the app itself; only a plain function of arity < 2
    // that is not an Express app is treated as a factory.
    if (isServer(value) || isListener(value)) return toServer(value)
    if (typeof value !== 'function') {
      throw invalidApp(new ClusterizeAppError(`clusterize: ${createApp} must export an Express app, a (req, res) listener, an http.Server, ` +
        `or a function that returns one (module.exports = app, or module.exports = () => app); it exports ${describe(value)}`))
    }
  }
  if (typeof value !== 'function') {
    throw invalidApp(new ClusterizeAppError('clusterize: createApp must be a function or a module path, got ' + describe(value)))
  }
  const built = unwrapModule(await value())
  if (isServer(built) || typeof built === 'function') return toServer(built)
  throw invalidApp(new ClusterizeAppError('clusterize: createApp must return an Express app, a (req, res) listener or an http.Server, got ' + describe(built)))
}

/**
 * Errors that every retry would repeat (a syntax error, a missing module,
 * a wrong export) are marked, so a first start stops at the first one.
 */
const DETERMINISTIC_LOAD_ERRORS = new Set(['MODULE_NOT_FOUND', 'ERR_REQUIRE_ESM', 'ERR_UNKNOWN_FILE_EXTENSION'])

function requireApp (file) {
  try {
    return require(file)
  } catch (err) {
    if (err instanceof SyntaxError || (err && DETERMINISTIC_LOAD_ERRORS.has(err.code))) {
      err.message = `cannot load ${file}: ${err.message.split('\n')[0]}${err instanceof SyntaxError ? whereInSource(err) : ''}`
      throw invalidApp(err)
    }
    throw err
  }
}

/**
 * Where a SyntaxError is, as Node prints it above the error: V8 puts
 * `file:line`, the source line and a caret at the top of the stack of a
 * module that failed to compile (the app's file or any file it requires).
 * @param {SyntaxError} err
 * @returns {string} ` at file:line` and the two source lines, or '' when the stack has no location
 */
function whereInSource (err) {
  const lines = String(err.stack || '').split('\n')
  if (!/:\d+$/.test(lines[0]) || /^\s*at /.test(lines[0])) return ''
  const source = []
  for (let i = 1; i < 3 && i < lines.length && lines[i] !== '' && !/^\w*Error:/.test(lines[i]); i++) source.push('    ' + lines[i])
  return ` at ${lines[0]}` + (source.length > 0 ? '\n' + source.join('\n') : '')
}

function invalidApp (err) {
  err.appInvalid = true
  return err
}

function unwrapModule (value) {
  if (value && typeof value === 'object' && value.__esModule && 'default' in value) return value.default
  return value
}

function isServer (value) {
  return value instanceof net.Server
}

function isExpressApp (value) {
  return typeof value === 'function' && typeof value.handle === 'function' && typeof value.set === 'function'
}

function isListener (value) {
  return isExpressApp(value) || (typeof value === 'function' && value.length >= 2)
}

function toServer (value) {
  if (isServer(value)) {
    if (value.listening) throw new ClusterizeAppError('clusterize: the http.Server returned by createApp is already listening; return it without calling listen()')
    const listeners = value.listeners('request')
    return { app: listeners.length === 1 ? listeners[0] : null, server: value }
  }
  const serverOptions = isExpressApp(value) ? expressServerOptions(value) : null
  return { app: value, server: serverOptions ? http.createServer(serverOptions, value) : http.createServer(value) }
}

function describe (value) {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return typeof value === 'object' ? 'an object with keys [' + Object.keys(value).slice(0, 5).join(', ') + ']' : typeof value
}

module.exports = { loadApp }
