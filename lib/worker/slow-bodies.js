'use strict'

/**
 * Requests whose body arrives slower than a minimum rate. Once its head has
 * arrived a request is in flight, so the idle bound (./connections.js) never
 * sheds it, and only Node's requestTimeout (300 s) ends it: 2,000 POSTs
 * sending one body byte every 5 s, reconnecting, once ran every worker out
 * of descriptors. So:
 * - a request whose body has averaged less than `minBytesPerSecond` since
 *   its head arrived, once `graceMs` has passed, is answered 408 and closed;
 * - at most `max` such requests are held at once: past it, the oldest of
 *   those below the rate go at once, grace or not (those younger than a
 *   second only past twice `max`), so a reconnecting flood is shed before
 *   descriptors run out.
 * Time the app is not reading the body (it paused the request, or has not
 * read what is buffered) does not count against the client: the clock
 * starts again when it reads.
 */

const debug = require('debug')('clusterize:slow-bodies')

const REQUEST_TIMEOUT_RESPONSE = 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n'
/** How often rates are checked, at most (less when graceMs is shorter). */
const CHECK_MS = 1000
/** A rate is never measured over less than this: a request just begun has sent little yet. */
const MIN_WINDOW_MS = 1000

/** What is kept per watched request. */
class BodyWatch {
  constructor (req, res, now) {
    this.req = req
    this.res = res
    this.socket = req.socket
    this.since = now
    this.bytesAtStart = req.socket.bytesRead
  }

  /** Body bytes a second since the window began (at least MIN_WINDOW_MS wide). */
  rate (now) {
    return (this.socket.bytesRead - this.bytesAtStart) * 1000 / Math.max(MIN_WINDOW_MS, now - this.since)
  }
}

/**
 * @param {import('http').Server} server
 * @param {{ minBytesPerSecond: number, graceMs: number, max: number, log?: object }} options
 *   `minBytesPerSecond`: 0 turns it off
 * @returns {{ readonly shed: number, readonly watched: number }}
 */
function watchSlowBodies (server, options) {
  const { minBytesPerSecond, graceMs, max, log } = options
  const counts = { shed: 0 }
  const status = {
    /** Requests closed for a body slower than minBytesPerSecond, since the start. */
    get shed () { return counts.shed },
    /** Requests whose body is still arriving. */
    get watched () { return watched.size }
  }
  const watched = new Set()
  if (!(minBytesPerSecond > 0)) return status
  const checkMs = Math.max(50, Math.min(CHECK_MS, Math.floor(graceMs / 2) || CHECK_MS))
  let timer = null
  let told = false
  let pressureScheduled = false

  server.prependListener('request', function watchBody (req, res) {
    if (!hasBody(req)) return
    watched.add(new BodyWatch(req, res, Date.now()))
    if (timer === null) {
      timer = setInterval(check, checkMs)
      timer.unref()
    }
    // Not now: the rest of this packet (often the whole body) is parsed after this event.
    if (watched.size > max && !pressureScheduled) {
      pressureScheduled = true
      setImmediate(function shedOnce () {
        pressureScheduled = false
        shedUnderPressure(Date.now())
      })
    }
  })

  function check () {
    const now = Date.now()
    for (const watch of watched) {
      if (done(watch)) continue
      if (!appReads(watch.req)) {
        // The app holds the body back: not the client's doing.
        watch.since = now
        watch.bytesAtStart = watch.socket.bytesRead
        continue
      }
      if (now - watch.since >= graceMs && watch.rate(now) < minBytesPerSecond) shed(watch, 'slower than the minimum rate')
    }
    if (watched.size > max) shedUnderPressure(now)
    if (watched.size === 0) {
      clearInterval(timer)
      timer = null
    }
  }

  /**
   * Past `max`: the oldest below the rate go at once, grace or not, but not one younger than
   * MIN_WINDOW_MS (its next packet may simply not be in yet) unless twice `max` are held.
   */
  function shedUnderPressure (now) {
    for (const watch of watched) {
      if (watched.size <= max) return
      if (done(watch)) continue
      if (now - watch.since < MIN_WINDOW_MS && watched.size <= 2 * max) continue
      if (watch.rate(now) < minBytesPerSecond) shed(watch, `more than ${max} slow bodies`)
    }
  }

  /** Forget a request whose body is whole, or whose connection is gone. */
  function done (watch) {
    if (!watch.req.complete && !watch.socket.destroyed) return false
    watched.delete(watch)
    return true
  }

  function shed (watch, why) {
    watched.delete(watch)
    counts.shed++
    debug('closing a request whose body is %s (%d B/s)', why, Math.round(watch.rate(Date.now())))
    if (!told) {
      told = true
      if (log) log.warn(`a request body arrived slower than ${minBytesPerSecond} bytes/s: answering 408 and closing such requests (option slowBody); counted in stats as slowBodyShed`, { pid: process.pid })
    }
    const socket = watch.socket
    // As Node's own requestTimeout does: a 408 only when no response has begun.
    if (!watch.res.headersSent && socket.writable) {
      socket.end(REQUEST_TIMEOUT_RESPONSE)
      setTimeout(() => socket.destroy(), 1000).unref()
    } else {
      socket.destroy()
    }
  }

  return status
}

/** A request with a body to wait for: a Content-Length above 0, or chunked. */
function hasBody (req) {
  if (req.headers['transfer-encoding'] !== undefined) return true
  const length = req.headers['content-length']
  return length !== undefined && length !== '0'
}

/** Is the app taking the body as it comes (reading, or not yet holding a full buffer)? */
function appReads (req) {
  return req.readableFlowing !== false && req.readableLength < req.readableHighWaterMark
}

module.exports = { watchSlowBodies }
