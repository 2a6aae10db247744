'use strict'

/**
 * OpenTelemetry resource attributes for a worker: its slot and generation,
 * added to OTEL_RESOURCE_ATTRIBUTES in the environment it is forked with, so
 * an SDK the app starts in the worker (NodeSDK, or a provider with the env
 * resource detector) labels every span with the worker that made it. Nothing
 * is loaded: a worker without OpenTelemetry just carries one more variable.
 * A warm spare takes its slot later than it starts: it reports slot -1.
 */

const ATTRIBUTES = 'OTEL_RESOURCE_ATTRIBUTES'

/**
 * @param {string|undefined} existing the primary's OTEL_RESOURCE_ATTRIBUTES (the app's own)
 * @param {{ slot: number, generation: number }} worker
 * @returns {string} the worker's OTEL_RESOURCE_ATTRIBUTES; the app's own keys win
 */
function workerResourceAttributes (existing, worker) {
  const own = String(existing || '').split(',').map((pair) => pair.trim()).filter(Boolean)
  const keys = new Set(own.map((pair) => pair.split('=')[0].trim()))
  const ours = [['clusterize.worker.slot', worker.slot], ['clusterize.worker.generation', worker.generation]]
    .filter(([key]) => !keys.has(key))
    .map(([key, value]) => `${key}=${encodeURIComponent(String(value))}`)
  return own.concat(ours).join(',')
}

module.exports = { workerResourceAttributes, ATTRIBUTES }
