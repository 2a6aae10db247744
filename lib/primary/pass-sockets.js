'use strict'

/**
 * Which listening sockets this primary can pass to a new one (`clusterize
 * upgrade`, ./upgrade.js), per scheduling mode:
 * - 'rr'/'sticky': the socket the primary's acceptor listens on;
 * - 'none': node:cluster keeps its shared socket private, so a ready
 *   worker sends its copy (or the primary passes the one it inherited);
 * - 'balanced': the shared socket the primary holds for its workers;
 * - 'reuseport': none; every new worker binds its own socket next to the old ones.
 * The probes socket goes with it in every mode.
 */

const protocol = require('../protocol')
const { descriptorOf } = require('./inherit')

/**
 * @param {{ listenMode: string, inherited: object, parts: object, state: object, config: object, supervisor: object }} context
 *   `parts.dispatcher`/`parts.probes` and `state.port` are read when an upgrade asks
 * @returns {{ passable: () => Promise<object>, onListening: (record: object, handle?: object) => void }}
 */
function createSocketPasser (context) {
  const { listenMode, inherited, parts, state, config, supervisor } = context
  /** Workers asked for their listening socket, by record. */
  const borrowing = new Map()

  /**
   * @returns {Promise<{ http: number|null, probes: number|null, port: number, portOption: number, error: string|null, release: () => void }>}
   *   `release()` closes what was borrowed for the handover
   */
  async function passable () {
    const sockets = { http: null, probes: parts.probes ? parts.probes.descriptor() : null, port: state.port, portOption: config.port, error: null, release: () => {} }
    if (listenMode === 'handoff') {
      sockets.http = parts.dispatcher ? parts.dispatcher.descriptor() : null
      if (sockets.http === null) sockets.error = `the listening socket has no descriptor to pass on (${process.platform})`
    } else if (listenMode === 'balanced') {
      // The shared socket the workers accept from: the new primary's workers accept from it too.
      sockets.http = parts.balancer ? parts.balancer.descriptor() : null
      if (sockets.http === null) sockets.error = `the listening socket has no descriptor to pass on (${process.platform})`
    } else if (listenMode === 'cluster') {
      sockets.http = inherited.http
      if (sockets.http === null) {
        const borrowed = await borrowListening()
        sockets.http = descriptorOf(borrowed)
        if (borrowed) sockets.release = () => borrowed.close()
        if (sockets.http === null) sockets.error = "scheduling 'none': no ready worker could pass on the listening socket node:cluster shares"
      }
    }
    return sockets
  }

  function borrowListening () {
    const record = supervisor.readyRecords()[0]
    if (!record) return Promise.resolve(null)
    return new Promise((resolve) => {
      const timer = setTimeout(() => finish(null), config.upgrade.timeoutMs)
      function finish (socketHandle) {
        clearTimeout(timer)
        borrowing.delete(record)
        resolve(socketHandle || null)
      }
      borrowing.set(record, finish)
      if (!record.channel.postNow(protocol.shareListening())) finish(null)
    })
  }

  /** A worker's answer (protocol LISTENING), with its socket or without one. */
  function onListening (record, socketHandle) {
    const finish = borrowing.get(record)
    if (finish) finish(socketHandle)
    else if (socketHandle) socketHandle.close()
  }

  return { passable, onListening }
}

/**
 * An inherited HTTP socket is accepted on by the primary ('rr'/'sticky') or
 * shared by node:cluster ('none'); 'reuseport' workers bind their own, so
 * there it would be a socket nobody reads: use 'rr' instead.
 * @param {{ mode: string, listenMode: string }} resolved from resolveScheduling()
 * @param {object} inherited from readInherited()
 * @param {object} log
 */
function inheritedScheduling (resolved, inherited, log) {
  if (inherited.http === null || resolved.listenMode !== 'reuseport') return resolved
  log.warn("scheduling 'reuseport' cannot serve an inherited socket (LISTEN_FDS): using 'rr'")
  return { mode: 'rr', listenMode: 'handoff' }
}

module.exports = { createSocketPasser, inheritedScheduling }
