'use strict'

/**
 * The process signals a clusterize process answers, the same in the primary
 * and in single-process mode: the shutdown signals drain and exit (a second
 * one exits at once), the reload signal reloads. Installing a handler also
 * keeps the reload signal (SIGUSR2) from killing the process.
 */

/**
 * The signals a reload may be bound to: ones a process can catch and that
 * do nothing harmful to a process that has no handler for them beyond ending
 * it. The CLI sends nothing else, whatever a pid file says.
 */
const RELOAD_SIGNALS = ['SIGUSR2', 'SIGHUP', 'SIGUSR1']
/**
 * The upgrade signal (a new primary replaces this one): SIGURG is used by
 * neither Node nor a terminal (SIGWINCH comes with every resize), a reload
 * cannot be bound to it, and its default action is to be ignored, so one
 * sent to a process without a handler harms nothing. The kernel raises it
 * only for a socket whose owner was set with F_SETOWN, which libuv never does.
 */
const UPGRADE_SIGNALS = ['SIGURG']

/**
 * @param {object} options
 * @param {string[]} options.shutdownSignals
 * @param {string|false|null} options.reloadSignal
 * @param {() => Promise<{ code: number }>} options.shutdown
 * @param {() => Promise<object>} options.reload
 * @param {string|false|null} [options.upgradeSignal]
 * @param {() => Promise<object>} [options.upgrade] replace the primary (lib/primary/upgrade.js)
 * @param {() => void} [options.forceExit] called before exiting on a second signal
 * @param {object} options.log internal logger
 * @returns {() => void} removes the handlers
 */
function handleSignals (options) {
  const { log } = options
  const installed = []
  let received = 0

  function on (signal, handler) {
    process.on(signal, handler)
    installed.push([signal, handler])
  }

  for (const signal of options.shutdownSignals) {
    on(signal, function onShutdownSignal () {
      if (++received > 1) {
        log.warn(`second ${signal}: exiting now`)
        if (options.forceExit) options.forceExit()
        process.exit(1)
      }
      options.shutdown().then((result) => process.exit(result.code))
    })
  }
  if (options.reloadSignal) {
    on(options.reloadSignal, function onReloadSignal () {
      // The reload logs its own outcome.
      options.reload().catch((err) => log.error(`reload failed: ${err.message}`))
    })
  }
  if (options.upgradeSignal && options.upgrade) {
    on(options.upgradeSignal, function onUpgradeSignal () {
      // The upgrade logs its own outcome.
      options.upgrade().catch((err) => log.error(`upgrade failed: ${err.message}`))
    })
  }
  return function removeSignalHandlers () {
    for (const [signal, handler] of installed) process.removeListener(signal, handler)
  }
}

module.exports = { handleSignals, RELOAD_SIGNALS, UPGRADE_SIGNALS }
