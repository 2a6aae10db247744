'use strict'

/**
 * Writing to a stream whose reader may go away (stdout piped to a log
 * shipper that restarts, a closed terminal) without being taken down by it.
 *
 * A pipe whose reader has exited fails the next write with EPIPE, emitted as
 * an 'error' event on the stream: with no listener it is an uncaught
 * exception, and a primary that dies for a log line takes the whole service
 * with it. So every stream clusterize writes to gets a listener, and a line
 * that cannot be written is dropped and counted: once the stream failed, and
 * while a stream that stopped reading (a stalled shipper) already holds
 * MAX_BUFFERED_BYTES it has not taken, so memory stays bounded.
 */

const debug = require('debug')('clusterize:output')

/** Bytes a stream may hold that its reader has not taken yet; later lines are dropped. */
const MAX_BUFFERED_BYTES = 1024 * 1024

const kGuarded = Symbol('clusterize.guarded')
const kFailed = Symbol('clusterize.failed')

const counts = { dropped: 0, failures: 0 }

/**
 * Give a stream an 'error' listener (once), so a write error is counted, not thrown.
 * Streams without on() (a plain `{ write }` object) are left alone.
 * @template T
 * @param {T} stream
 * @returns {T}
 */
function guardStream (stream) {
  if (!stream || stream[kGuarded] || typeof stream.on !== 'function') return stream
  stream[kGuarded] = true
  stream.on('error', onStreamError)
  return stream
}

function onStreamError (err) {
  // The write that failed is lost too.
  if (!this[kFailed]) counts.dropped++
  this[kFailed] = true
  counts.failures++
  debug('an output stream failed (%s): its lines are dropped from now on', err && err.code ? err.code : err)
}

/**
 * Write text, or drop it (and count it) when the stream failed, was closed,
 * or holds too much its reader has not taken.
 * @param {{ write: Function }} stream
 * @param {string} text
 * @returns {boolean} whether the text was handed to the stream
 */
function writeSafely (stream, text) {
  guardStream(stream)
  if (stream[kFailed] || stream.destroyed || stream.writableEnded || stream.writableLength > MAX_BUFFERED_BYTES) {
    counts.dropped++
    return false
  }
  try {
    stream.write(text)
    return true
  } catch (err) {
    // A user-given `{ write }` that throws is no reason to die either.
    counts.dropped++
    debug('a write to an output stream threw: %s', err && err.message)
    return false
  }
}

/** Guard this process's stdout and stderr: the app's console.log and our logs share them. */
function guardStdio () {
  guardStream(process.stdout)
  guardStream(process.stderr)
}

/**
 * @returns {{ dropped: number, failures: number }} lines dropped in this process, and stream errors seen
 */
function outputStatus () {
  return { dropped: counts.dropped, failures: counts.failures }
}

module.exports = { guardStream, writeSafely, guardStdio, outputStatus, MAX_BUFFERED_BYTES }
