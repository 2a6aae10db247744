'use strict'

/**
 * `--json`: a pino-compatible logger that writes one JSON object per line:
 * `{ time, level, pid, msg, ...fields }`.
 */

const { writeSafely, guardStream } = require('../safe-write')

const LEVELS = ['debug', 'info', 'warn', 'error']

/**
 * @param {{ write: (line: string) => any }} [stream] defaults to stdout
 * @param {object} [base] fields added to every line (e.g. `{ role: 'primary' }`)
 * @returns {{ debug: Function, info: Function, warn: Function, error: Function }}
 */
function createJsonLogger (stream, base) {
  stream = guardStream(stream || process.stdout)
  const logger = {}
  for (const level of LEVELS) {
    logger[level] = function log (fields, msg) {
      if (typeof fields === 'string') {
        const text = fields
        fields = msg && typeof msg === 'object' ? msg : {}
        msg = text
      }
      const line = Object.assign({ time: new Date().toISOString(), level, pid: process.pid, msg: String(msg) }, base)
      addFields(line, toPlain(fields))
      // A reader that went away (EPIPE: a log shipper restarting) costs the line, never the process.
      writeSafely(stream, safeStringify(line) + '\n')
    }
  }
  return logger
}

const RESERVED = { time: 'fieldTime', level: 'fieldLevel', msg: 'fieldMsg', pid: 'workerPid' }

/**
 * Copy fields onto the line without letting them replace time, level, msg
 * or pid. The library logs a worker's pid as `pid`; here it becomes
 * `workerPid` so `pid` is always the process that wrote the line.
 */
function addFields (line, fields) {
  for (const key of Object.keys(fields)) {
    if (fields[key] === undefined) continue
    line[Object.hasOwn(RESERVED, key) ? RESERVED[key] : key] = fields[key]
  }
}

function toPlain (fields) {
  if (!fields || typeof fields !== 'object') return {}
  if (fields instanceof Error) return { err: { message: fields.message, stack: fields.stack, code: fields.code } }
  return fields
}

function safeStringify (value) {
  try {
    return JSON.stringify(value)
  } catch {
    return JSON.stringify({ time: value.time, level: value.level, pid: value.pid, msg: value.msg, fields: '[unserializable]' })
  }
}

module.exports = { createJsonLogger }
