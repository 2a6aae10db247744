'use strict'

/**
 * Load generators: autocannon (programmatic) for throughput, a small
 * keep-alive client loop that records every request (for reload windows and
 * per-route latency), counting failures = connection errors + non-2xx, and a
 * paced open-loop client for latency at a fixed rate.
 */

const http = require('http')
const { numberArg } = require('./args')

/**
 * autocannon acts on the end of its `duration` only at its next sample tick
 * (every 1000 ms by default), so a 0.5 s run took a whole second. Sampling
 * every 100 ms makes fractional durations (the --quick ones) last what they
 * say. Results are totals over the measured duration, so nothing else moves.
 */
const SAMPLE_MS = 100

/**
 * @param {{ port: number, path?: string, connections?: number, durationSec?: number, reconnectRate?: number }} options
 * @returns {Promise<{ rps: number, p50: number, p99: number, errors: number, non2xx: number }>}
 */
async function runAutocannon (options) {
  // Required here, not at the top: the bench scripts' server processes load this file for its
  // helpers, and autocannon would add about 28 MB of RSS and 200 ms of start-up to each of them.
  const autocannon = require('autocannon')
  const result = await autocannon({
    url: `http://127.0.0.1:${options.port}${options.path || '/'}`,
    connections: options.connections || 50,
    duration: options.durationSec || 5,
    reconnectRate: options.reconnectRate,
    overallRate: options.overallRate,
    pipelining: 1,
    sampleInt: SAMPLE_MS
  })
  return {
    rps: result.requests.total / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx
  }
}

/** A request with no answer after this long fails as ETIMEDOUT (see requestTimeoutArg). */
const REQUEST_TIMEOUT_MS = 10000

/**
 * The client loop's request timeout for a bench: `--request-timeout-ms`, else
 * REQUEST_TIMEOUT_MS, or 3 s under --quick (a hung request would otherwise
 * hold a quick row for 10 s; it fails either way).
 * @returns {number} ms
 */
function requestTimeoutArg () {
  return numberArg('--request-timeout-ms', REQUEST_TIMEOUT_MS, 3000)
}

/**
 * `concurrency` loops, each sending one request after another until
 * `durationMs` passes or `signal` aborts (no new request starts after
 * either). Every request is recorded as { start, ms, ok, path }.
 * @param {{ port: number, concurrency: number, durationMs: number, keepAlive?: boolean, pickPath?: (n: number) => string, signal?: AbortSignal, timeoutMs?: number }} options
 */
async function runClientLoop (options) {
  const agent = options.keepAlive === false
    ? false
    : new http.Agent({ keepAlive: true, maxSockets: options.concurrency })
  const pickPath = options.pickPath || (() => '/')
  const samples = []
  const errors = {}
  const stopAt = Date.now() + options.durationMs
  const timeoutMs = options.timeoutMs || REQUEST_TIMEOUT_MS
  let counter = 0

  async function loop () {
    while (Date.now() < stopAt && !(options.signal && options.signal.aborted)) {
      const path = pickPath(counter++)
      const wall = Date.now()
      const start = performance.now()
      const outcome = await request(options.port, path, agent, undefined, timeoutMs)
      samples.push({ start: wall, ms: performance.now() - start, ok: outcome.ok, path })
      if (!outcome.ok) errors[outcome.why] = (errors[outcome.why] || 0) + 1
    }
  }

  await Promise.all(Array.from({ length: options.concurrency }, loop))
  if (agent) agent.destroy()
  return { samples, errors }
}

/**
 * Requests at a steady `rate` per second for `seconds`, over at most
 * `connections` kept-alive sockets: open loop, so a slow answer does not hold
 * the next request back (it waits for a free socket, and that wait counts).
 * Each request's latency runs from the moment it is handed to the agent
 * (which includes any wait for a free socket, so a server's stall shows in
 * every request it delays) to its last byte; the timer's own lateness (up to
 * a millisecond, the same for every server) is left out. autocannon's
 * `overallRate` is not this: each connection sends its second's quota back to
 * back, then waits for the next second.
 * @param {{ port: number, path: string, rate: number, seconds: number, connections: number, headers?: (n: number) => object }} options
 * @returns {Promise<{ sent: number, ms: number[], errors: number }>} ms of every 2xx answer
 */
async function runPaced (options) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: options.connections })
  const headers = options.headers || (() => undefined)
  const total = Math.round(options.rate * options.seconds)
  const ms = []
  let errors = 0
  const pending = []
  const start = performance.now()
  let sent = 0
  await new Promise((resolve) => {
    function tick () {
      const now = performance.now()
      const due = Math.min(total, Math.floor(((now - start) / 1000) * options.rate) + 1)
      for (; sent < due; sent++) {
        const issuedAt = performance.now()
        pending.push(request(options.port, options.path, agent, headers(sent)).then((outcome) => {
          if (outcome.ok) ms.push(performance.now() - issuedAt)
          else errors++
        }))
      }
      if (sent < total) setTimeout(tick, 1)
      else resolve()
    }
    tick()
  })
  await Promise.all(pending)
  agent.destroy()
  return { sent, ms, errors }
}

function request (port, path, agent, headers, timeoutMs = REQUEST_TIMEOUT_MS) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent, headers, timeout: timeoutMs }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode >= 200 && res.statusCode < 300
        ? { ok: true }
        : { ok: false, why: 'HTTP ' + res.statusCode }))
      res.on('error', (err) => resolve({ ok: false, why: err.code || err.message }))
    })
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })))
    req.on('error', (err) => resolve({ ok: false, why: err.code || err.message }))
  })
}

/**
 * p50 and p99 of a runPaced run, and how many of its requests failed.
 * @param {Parameters<typeof runPaced>[0]} options
 * @returns {Promise<{ p50: number, p99: number, errors: number }>}
 */
async function pacedLatency (options) {
  const result = await runPaced(options)
  return { p50: percentile(result.ms, 50), p99: percentile(result.ms, 99), errors: result.errors }
}

/** The p-th percentile (0..100) of an array of numbers. */
function percentile (values, p) {
  if (values.length === 0) return NaN
  const sorted = Float64Array.from(values).sort()
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[index]
}

module.exports = { SAMPLE_MS, requestTimeoutArg, runAutocannon, runClientLoop, runPaced, pacedLatency, percentile }
