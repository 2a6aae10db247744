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
 * @param {object} options
 * @param {string[]} options.shutdownSignals
 * @param {string|false|null} options.reloadSignal
 * @param {() => Promise<{ code: number }>} options.shutdown
 * @param {() => Promise<object>} options.reload
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
  return function removeSignalHandlers () {
    for (const [signal, handler] of installed) process.removeListener(signal, handler)
  }
}

module.exports = { handleSignals, RELOAD_SIGNALS }
