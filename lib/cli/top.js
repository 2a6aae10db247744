'use strict'

/**
 * `clusterize top`: the dashboard's live data in the terminal. Reads the
 * probes server's event stream (/dashboard/events), redraws a table of the
 * workers with sparklines of requests/s and event-loop delay, and the last
 * lifecycle events. `q` or Ctrl-C quits.
 */

const http = require('http')
const { findPrimary, probesTarget, loopbackFor, CliRuntimeError } = require('./control')
const { printable } = require('../dashboard/printable')

const SPARKS = '\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588'
const HISTORY = 30

/**
 * @param {object} flags
 * @param {{ stdout: object, stderr: object, env: object, stdin?: object }} io
 * @returns {Promise<number>} exit code
 */
function top (flags, io) {
  const target = resolveTarget(flags)
  const token = io.env.CLUSTERIZE_DASHBOARD_TOKEN
  const stdin = io.stdin || process.stdin
  const state = { events: [], rates: new Map(), delays: new Map(), served: new Map(), last: null }
  return new Promise((resolve, reject) => {
    let finished = false
    const req = http.get({
      host: target.host,
      port: target.port,
      path: '/dashboard/events',
      headers: token ? { Authorization: `Bearer ${token}` } : {},
      agent: false
    }, (res) => {
      if (res.statusCode === 404) return fail(new CliRuntimeError('the probes server has no dashboard (probes.dashboard is off)'))
      if (res.statusCode === 401) return fail(new CliRuntimeError('the dashboard needs its token: set CLUSTERIZE_DASHBOARD_TOKEN'))
      if (res.statusCode !== 200) return fail(new CliRuntimeError(`/dashboard/events answered ${res.statusCode}`))
      res.setEncoding('utf8')
      let buffer = ''
      res.on('data', (chunk) => {
        buffer += chunk
        let end
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          onFrame(buffer.slice(0, end))
          buffer = buffer.slice(end + 2)
        }
      })
      res.on('end', () => finish(0, 'the primary closed the stream (shut down?)\n'))
    })
    req.on('error', (err) => fail(new CliRuntimeError(`cannot reach http://${target.host}:${target.port}/dashboard/events: ${err.message}`)))

    if (stdin.isTTY && typeof stdin.setRawMode === 'function') stdin.setRawMode(true)
    stdin.resume()
    stdin.on('data', onKey)
    process.once('SIGINT', onInterrupt)

    function onKey (data) {
      const key = String(data)
      if (key === 'q' || key === 'Q' || key === '\u0003') finish(0)
    }
    function onInterrupt () { finish(0) }

    function onFrame (frame) {
      const name = (/^event: (.*)$/m.exec(frame) || [])[1]
      const data = (/^data: (.*)$/m.exec(frame) || [])[1]
      if (!name || data === undefined) return
      const message = JSON.parse(data)
      if (name === 'hello') {
        state.events = message.events.slice(-5)
        // The hello carries the latest snapshot (older primaries: all of them).
        for (const snap of message.snapshots || (message.snapshot ? [message.snapshot] : [])) record(snap)
      } else if (name === 'lifecycle') {
        state.events.push(message)
        if (state.events.length > 5) state.events.shift()
      } else if (name === 'snapshot') {
        record(message)
        io.stdout.write(render(state, target))
      }
    }

    function record (snap) {
      for (const w of snap.workers) {
        const previous = state.served.get(w.pid)
        if (previous && typeof w.served === 'number' && snap.t > previous.t) {
          push(state.rates, w.pid, Math.max(0, (w.served - previous.served) * 1000 / (snap.t - previous.t)))
        }
        if (typeof w.served === 'number') state.served.set(w.pid, { t: snap.t, served: w.served })
        if (typeof w.eld === 'number') push(state.delays, w.pid, w.eld)
      }
      state.last = snap
    }

    function finish (code, message) {
      if (finished) return
      finished = true
      req.destroy()
      stdin.removeListener('data', onKey)
      process.removeListener('SIGINT', onInterrupt)
      if (stdin.isTTY && typeof stdin.setRawMode === 'function') stdin.setRawMode(false)
      stdin.pause()
      io.stdout.write('\x1b[?25h' + (message || ''))
      resolve(code)
    }
    function fail (err) {
      if (finished) return
      finish(1)
      reject(err)
    }
  })
}

function resolveTarget (flags) {
  if (flags.probesPort !== undefined) return { host: loopbackFor(flags.probesHost || '127.0.0.1'), port: flags.probesPort }
  const { info } = findPrimary(flags)
  const target = probesTarget(info)
  if (!target) throw new CliRuntimeError(`primary ${info.pid} has no probes server (single-process mode, workers 0?), so there is nothing to watch`)
  return target
}

function push (map, key, value) {
  const list = map.get(key) || []
  list.push(value)
  if (list.length > HISTORY) list.shift()
  map.set(key, list)
}

function sparkline (values) {
  if (!values || values.length === 0) return ''
  const max = Math.max(...values, 1e-9)
  return values.map((v) => SPARKS[Math.min(SPARKS.length - 1, Math.floor((v / max) * (SPARKS.length - 1)))]).join('')
}

function pad (value, width, left) {
  const text = String(value)
  return left ? text.padEnd(width) : text.padStart(width)
}

/** One frame: clear the screen, then the header, the workers and the last events. */
function render (state, target) {
  const snap = state.last
  const health = snap.shuttingDown ? 'shutting down' : snap.crashLooping ? 'CRASH LOOP' : 'live'
  const lines = [
    printable(`clusterize top  ${target.host}:${target.port}  ${snap.scheduling}  generation ${snap.generation}  reloads ${snap.reloads}  ${health}    q to quit`),
    '',
    [pad('slot', 5, true), pad('pid', 8), pad('gen', 4), ' ' + pad('state', 9, true), pad('RSS MB', 7), pad('loop ms', 8), pad('req/s', 8), '  ' + pad('req/s (last 30)', HISTORY, true), '  loop delay'].join('')
  ]
  for (const w of snap.workers) {
    const rates = state.rates.get(w.pid) || []
    lines.push(printable([
      pad(w.id < 0 ? 'spare' : w.id, 5, true),
      pad(w.pid, 8),
      pad(w.generation, 4),
      ' ' + pad(w.state, 9, true),
      pad(typeof w.rss === 'number' ? Math.round(w.rss / 1048576) : '-', 7),
      pad(typeof w.eld === 'number' ? w.eld.toFixed(1) : '-', 8),
      pad(rates.length ? rates[rates.length - 1].toFixed(0) : '-', 8),
      '  ' + pad(sparkline(rates), HISTORY, true),
      '  ' + sparkline(state.delays.get(w.pid))
    ].join('')))
  }
  lines.push('', 'recent events:')
  // Worker text (boot errors, reasons) must not drive the terminal.
  for (const e of state.events.slice().reverse()) lines.push(printable(`  ${new Date(e.t).toLocaleTimeString()}  ${describe(e)}`))
  return '\x1b[?25l\x1b[H\x1b[2J' + lines.join('\n') + '\n'
}

function describe (e) {
  switch (e.type) {
    case 'worker-ready': return `worker ${e.id} ready (pid ${e.pid}, generation ${e.generation})`
    case 'worker-exit': return `worker ${e.id} exited: ${e.reason} (pid ${e.pid})`
    case 'reload-start': return `reload started (generation ${e.generation})`
    case 'reload-done': return e.ok ? `reload done in ${e.durationMs} ms` : `reload ${e.rolledBack ? 'rolled back' : 'stopped'}: ${e.reason}`
    case 'upgrade-start': return `upgrade started (${e.node})`
    case 'upgrade-done': return e.ok ? `upgrade done: primary ${e.previousPid} -> ${e.pid} (Node ${e.node})` : `upgrade failed: ${e.reason}`
    case 'crashloop': return `crash loop (generation ${e.generation}): ${e.lastError}`
    default: return e.type
  }
}

module.exports = { top }
