'use strict'

/**
 * OpenTelemetry without depending on it. An app that runs the OpenTelemetry
 * SDK registers its API under a global symbol; clusterize reads the active
 * span from there, so nothing is loaded when the app does not trace:
 * - workers get their slot and generation as resource attributes
 *   (OTEL_RESOURCE_ATTRIBUTES, read by the SDK's environment detector);
 * - `req.offload()` carries the active span's context to the thread, where
 *   the task runs as its child (when the thread runs the SDK too).
 */

/** Where @opentelemetry/api keeps its registered globals (api major version 1). */
const API_GLOBAL = Symbol.for('opentelemetry.js.api.1')
/** The context key @opentelemetry/api stores the active span under (createContextKey). */
const SPAN_KEY = Symbol.for('OpenTelemetry Context Key SPAN')

/**
 * The worker's fork environment with its slot and generation added to
 * OTEL_RESOURCE_ATTRIBUTES (after the app's own, which keep their values).
 * @param {object} env the fork environment (CLUSTERIZE_WORKER_ID, CLUSTERIZE_GENERATION)
 * @param {string} [inherited] the primary's OTEL_RESOURCE_ATTRIBUTES
 * @returns {object}
 */
function withResourceAttributes (env, inherited) {
  const ours = `clusterize.worker.slot=${env.CLUSTERIZE_WORKER_ID},clusterize.worker.generation=${env.CLUSTERIZE_GENERATION}`
  return Object.assign({}, env, { OTEL_RESOURCE_ATTRIBUTES: inherited ? `${inherited},${ours}` : ours })
}

/**
 * The active span's context, as a plain object that crosses postMessage,
 * or undefined (no SDK registered, or no span active).
 * @returns {{ traceId: string, spanId: string, traceFlags: number }|undefined}
 */
function activeSpanContext () {
  const api = globalThis[API_GLOBAL]
  if (!api || !api.context || typeof api.context.active !== 'function') return undefined
  const span = api.context.active().getValue(SPAN_KEY)
  if (!span || typeof span.spanContext !== 'function') return undefined
  const { traceId, spanId, traceFlags } = span.spanContext()
  return { traceId, spanId, traceFlags }
}

/**
 * Run `fn` with `spanContext` as the active (remote) parent, when this
 * thread runs the OpenTelemetry SDK; otherwise just run it.
 * @param {{ traceId: string, spanId: string, traceFlags: number }|undefined} spanContext
 * @param {() => *} fn
 */
function runWithSpanContext (spanContext, fn) {
  if (!spanContext || !globalThis[API_GLOBAL]) return fn()
  const api = loadApi()
  if (!api) return fn()
  const parent = api.trace.setSpanContext(api.ROOT_CONTEXT, Object.assign({ isRemote: true }, spanContext))
  return api.context.with(parent, fn)
}

/**
 * @opentelemetry/api, from beside clusterize or from the app's directory: the
 * app that registered the SDK has it installed, and any copy reads the same globals.
 */
function loadApi () {
  try {
    return require('@opentelemetry/api')
  } catch {}
  try {
    return require('module').createRequire(require('path').join(process.cwd(), 'noop.js'))('@opentelemetry/api')
  } catch {
    return null
  }
}

module.exports = { withResourceAttributes, activeSpanContext, runWithSpanContext }
