'use strict'

/**
 * socket.io recovery in the primary: the sockets connected right now, by
 * worker process, with the last state each worker reported of them (see
 * ./recovery-service.js). A restore that races the old worker's persist
 * waits here for the socket to go; a worker that dies holding sockets
 * leaves their last state to be persisted instead.
 */

const { isSession } = require('./recovery-log')

/** The key of a socket: a namespace and socket.io's private session id. */
const keyOf = (nsp, pid) => nsp + '\n' + pid

class LiveSockets {
  constructor () {
    /** @type {Map<string, number>} key -> pid of the worker process holding that socket */
    this.holders = new Map()
    /** @type {Map<number, Set<string>>} worker process pid -> its keys */
    this.byProcess = new Map()
    /**
     * @type {Map<string, object>} key -> the session of a live socket as its worker last reported it
     * (id, rooms, socket.data): persisted if that worker dies without persisting it
     */
    this.shadows = new Map()
    /** @type {Map<string, Array<Function>>} restores waiting for a live socket to go */
    this.waiting = new Map()
  }

  get size () { return this.holders.size }

  /** The worker process holding the socket, or undefined. */
  holder (nsp, pid) {
    return this.holders.get(keyOf(nsp, pid))
  }

  /**
   * A socket is connected on worker process `workerPid`; `session`, when
   * given, is its current state (sent at connection and at each room change).
   */
  mark (nsp, pid, workerPid, session) {
    const key = keyOf(nsp, pid)
    const holder = this.holders.get(key)
    if (holder !== undefined && holder !== workerPid) this.gone(nsp, pid)
    this.holders.set(key, workerPid)
    if (isSession(session, pid)) this.shadows.set(key, session)
    let keys = this.byProcess.get(workerPid)
    if (keys === undefined) {
      keys = new Set()
      this.byProcess.set(workerPid, keys)
    }
    keys.add(key)
  }

  /** The socket is no longer connected (disconnected, persisted, or its worker died): wake its waiters. */
  gone (nsp, pid) {
    const key = keyOf(nsp, pid)
    const workerPid = this.holders.get(key)
    if (workerPid === undefined) return
    this.holders.delete(key)
    this.shadows.delete(key)
    const keys = this.byProcess.get(workerPid)
    if (keys !== undefined) {
      keys.delete(key)
      if (keys.size === 0) this.byProcess.delete(workerPid)
    }
    const waiters = this.waiting.get(key)
    if (waiters !== undefined) {
      this.waiting.delete(key)
      for (const wake of waiters) wake()
    }
  }

  /** @returns {Promise<void>} once the socket is gone, or after `ms` (unref'd: never keeps the process alive) */
  waitGone (nsp, pid, ms) {
    const key = keyOf(nsp, pid)
    return new Promise((resolve) => {
      let waiters = this.waiting.get(key)
      if (waiters === undefined) {
        waiters = []
        this.waiting.set(key, waiters)
      }
      const timer = setTimeout(wake, ms)
      timer.unref()
      waiters.push(wake)
      function wake () {
        clearTimeout(timer)
        resolve()
      }
    })
  }

  /**
   * The sockets worker process `workerPid` holds, with the state it last
   * reported of each (undefined if none).
   * @returns {Array<{ nsp: string, pid: string, session: object|undefined }>}
   */
  heldBy (workerPid) {
    const keys = this.byProcess.get(workerPid)
    if (keys === undefined) return []
    return Array.from(keys, (key) => {
      const cut = key.lastIndexOf('\n')
      return { nsp: key.slice(0, cut), pid: key.slice(cut + 1), session: this.shadows.get(key) }
    })
  }

  /** The worker processes holding sockets. */
  processes () {
    return Array.from(this.byProcess.keys())
  }
}

module.exports = { LiveSockets }
