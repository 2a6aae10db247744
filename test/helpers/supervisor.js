'use strict'

/**
 * A Supervisor on its own, for the supervisor tests: resolved options, a
 * logger that keeps its lines, and the primary's routing table for what
 * workers send (lib/primary/index.js, without the bus).
 */

const protocol = require('../../lib/protocol')
const { resolveConfig } = require('../../lib/config')
const { Supervisor } = require('../../lib/primary/supervisor')

/** A logger that keeps every line as '<level> <message>'. */
function collectingLog () {
  const lines = []
  const write = (level) => (msg) => lines.push(`${level} ${msg}`)
  return { lines, debug () {}, info: write('info'), warn: write('warn'), error: write('error') }
}

/**
 * @param {object} options clusterize() options (port 0, no banner, no logger unless given)
 * @param {(env: object) => object} fork cluster.fork, or a fake
 * @returns {{ supervisor: Supervisor, config: object, log: ReturnType<typeof collectingLog> }}
 */
function createSupervisor (options, fork) {
  const config = resolveConfig(Object.assign({ port: 0, banner: false, logger: false }, options))
  const log = collectingLog()
  const runtime = { listenMode: 'handoff', port: 0, route: null, fork }
  const supervisor = new Supervisor(config, log, runtime)
  runtime.route = protocol.createRouter({
    [protocol.KIND.READY]: (record, message) => supervisor.onReady(record, message),
    [protocol.KIND.HEARTBEAT]: (record, message) => supervisor.onHeartbeat(record, message),
    [protocol.KIND.BOOT_ERROR]: (record, message) => supervisor.onBootError(record, message),
    [protocol.KIND.DRAINED]: (record, message) => supervisor.onDrained(record, message),
    [protocol.KIND.ALIVE]: (record, message) => supervisor.onAlive(record, message)
  }, () => {})
  return { supervisor, config, log }
}

module.exports = { createSupervisor, collectingLog }
