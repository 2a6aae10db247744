'use strict'

/**
 * The library logs only through this adapter. It accepts a pino-compatible
 * logger (`info(fields, msg)`), a console-like one, or `false` for silence.
 * The default prints one readable line per lifecycle event on stderr.
 */

const { writeSafely } = require('./safe-write')

function formatFields (fields) {
  if (!fields) return ''
  let out = ''
  for (const key of Object.keys(fields)) {
    const value = fields[key]
    if (value === undefined) continue
    out += ' ' + key + '=' + (typeof value === 'string' && !/\s/.test(value) ? value : JSON.stringify(value))
  }
  return out
}

function createDefaultSink (stream, prefix) {
  function write (level, fields, msg) {
    const tag = level === 'info' ? '' : level.toUpperCase() + ' '
    // A stderr whose reader went away (EPIPE) drops the line: it never takes the process down.
    writeSafely(stream, `[clusterize${prefix}] ${tag}${msg}${formatFields(fields)}\n`)
  }
  return {
    debug () {},
    info: (fields, msg) => write('info', fields, msg),
    warn: (fields, msg) => write('warn', fields, msg),
    error: (fields, msg) => write('error', fields, msg)
  }
}

/**
 * Make the internal logger: `log.info(msg, fields)`.
 * @param {object|false|undefined} option the user's `logger` option
 * @param {string} [prefix] shown in default lines, e.g. ' worker 2'
 */
function createLogger (option, prefix) {
  if (option === false || option === null) {
    const noop = function noop () {}
    return { debug: noop, info: noop, warn: noop, error: noop }
  }
  const sink = option || createDefaultSink(process.stderr, prefix || '')
  const isConsole = option === console
  function level (name) {
    const fn = typeof sink[name] === 'function' ? sink[name] : sink.info
    if (isConsole) {
      return (msg, fields) => fn.call(sink, '[clusterize] ' + msg + formatFields(fields))
    }
    return (msg, fields) => fn.call(sink, fields || {}, msg)
  }
  return { debug: level('debug'), info: level('info'), warn: level('warn'), error: level('error') }
}

module.exports = { createLogger }
