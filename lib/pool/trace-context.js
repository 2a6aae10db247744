'use strict'

/**
 * OpenTelemetry's trace context across the thread hop of `req.offload()`:
 * the calling thread writes the active context as W3C headers (traceparent,
 * tracestate) into the task, and the pool thread runs the task inside the
 * context read back from them, so a span the task starts is a child of the
 * request's span.
 *
 * Only the public API of `@opentelemetry/api` is used, and only when the app
 * has loaded it: this package neither depends on it nor loads it. It is found
 * among the modules already loaded (require.cache); the API keeps its state in
 * one global whatever copy is loaded, so any copy answers for all.
 */

const debug = require('debug')('clusterize:offload')

/** How often a process that has not loaded the API looks again (the app may load it later). */
const LOOK_AGAIN_MS = 1000
const API_ENTRY = /[\\/]node_modules[\\/]@opentelemetry[\\/]api[\\/]build[\\/]src[\\/]index\.js$/

let api = null
let lookedAt = -Infinity

/** @returns {object|null} a loaded @opentelemetry/api, or null */
function loadedApi () {
  if (api !== null) return api
  const now = Date.now()
  if (now - lookedAt < LOOK_AGAIN_MS) return null
  lookedAt = now
  for (const file of Object.keys(require.cache)) {
    if (!API_ENTRY.test(file)) continue
    const exports = require.cache[file].exports
    if (exports && exports.context && exports.propagation && typeof exports.propagation.inject === 'function') {
      api = exports
      debug('trace context: @opentelemetry/api found at %s', file)
      return api
    }
  }
  return null
}

/**
 * The active trace context as W3C headers, for a task leaving this thread.
 * @returns {Record<string, string>|undefined} undefined when no API is loaded or no span is active
 */
function captureTraceContext () {
  const otel = loadedApi()
  if (otel === null) return undefined
  const carrier = {}
  otel.propagation.inject(otel.context.active(), carrier)
  return carrier.traceparent === undefined ? undefined : carrier
}

/**
 * Run `fn` inside the context `carrier` describes (in a pool thread).
 * Without a carrier, or without the API in this thread, it just runs `fn`.
 * @param {Record<string, string>|undefined} carrier
 * @param {() => unknown} fn
 * @returns {unknown} what fn returns
 */
function runInTraceContext (carrier, fn) {
  if (carrier === undefined || carrier === null) return fn()
  const otel = loadedApi()
  if (otel === null) return fn()
  return otel.context.with(otel.propagation.extract(otel.ROOT_CONTEXT, carrier), fn)
}

module.exports = { captureTraceContext, runInTraceContext }
