'use strict'

/**
 * Binding the app's port in the primary, by listen mode: the shared socket
 * for 'balanced', our acceptor for 'rr'/'sticky' ('handoff'); otherwise the
 * workers bind it themselves and only need to agree on one.
 */

const { createDispatcher } = require('./dispatcher')
const { createBalancer } = require('./balancer')
const { findFreePort } = require('./scheduling')
const { explainListenError } = require('../errors')
const { defaultMaxIdleConnections } = require('../fd-limit')

/**
 * @param {{ config: object, mode: string, listenMode: string, inherited: object, port: number, supervisor: object, parts: object, log: object }} context
 *   port: the port known so far (kept when the workers bind an inherited or given one)
 *   parts: the primary's parts; `balancer` or `dispatcher` is set here, `health` is read once it exists
 * @returns {Promise<number>} the app's port
 */
async function bindAppPort ({ config, mode, listenMode, inherited, port, supervisor, parts, log }) {
  const health = { isOverloaded: (record) => (parts.health ? parts.health.isOverloaded(record) : false) }
  if (listenMode === 'balanced') {
    if (parts.balancer !== null) return port // bound before the workers started (an upgrade)
    const fd = inherited.http !== null ? inherited.http : undefined
    // A new primary of an upgrade: its workers accept only after the old one's go (index.js releases them).
    parts.balancer = createBalancer({ port: config.port, host: config.host, workers: config.workers, fd, held: inherited.source === 'upgrade' }, supervisor, health)
    port = await listenOrExplain(parts.balancer, config, log)
  } else if (listenMode === 'handoff') {
    const fd = inherited.http !== null ? inherited.http : undefined
    parts.dispatcher = createDispatcher({ mode, port: config.port, host: config.host, fd, sid: mode === 'sticky' && config.sticky.sid, maxAwaiting: config.maxIdleConnections, maxHandoff: defaultMaxIdleConnections(), log }, supervisor, health)
    port = await listenOrExplain(parts.dispatcher, config, log)
  } else if (config.port === 0 && inherited.port === null) {
    // Workers bind the port themselves: they must all agree on one.
    port = await findFreePort(config.host)
  }
  if (inherited.source === 'systemd' && listenMode === 'handoff' && port !== config.port) {
    log.info(`serving on the socket systemd passed (LISTEN_FDS), port ${port}; the port option (${config.port}) is not used`)
  }
  return port
}

/** Listen; a failure is logged with what to do about it (explainListenError), then thrown. */
async function listenOrExplain (acceptor, config, log) {
  try {
    return (await acceptor.listen()).port
  } catch (err) {
    explainListenError(err, config.port)
    log.error(`cannot listen: ${err.message}`)
    throw err
  }
}

module.exports = { bindAppPort }
