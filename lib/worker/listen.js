'use strict'

const { explainListenError } = require('../errors')

/**
 * Listen and resolve with the bound address, or reject with a clear
 * error (EADDRINUSE names the port and what to do).
 * @param {import('net').Server} server
 * @param {{ port: number, host?: string, fd?: number, reusePort?: boolean }} options
 *   `fd`: a descriptor open in the primary to listen on (node:cluster shares it) instead of the port
 * @returns {Promise<{ port: number, address: string, family: string }>}
 */
function listenServer (server, options) {
  return new Promise((resolve, reject) => {
    function onError (err) {
      server.removeListener('listening', onListening)
      reject(explainListenError(err, options.port))
    }
    function onListening () {
      server.removeListener('error', onError)
      resolve(server.address())
    }
    server.once('error', onError)
    server.once('listening', onListening)
    if (options.fd !== undefined) return server.listen({ fd: options.fd })
    const listenOptions = { port: options.port }
    if (options.host) listenOptions.host = options.host
    if (options.reusePort) {
      // Each worker binds its own socket and the kernel spreads connections.
      listenOptions.reusePort = true
      listenOptions.exclusive = true
    }
    server.listen(listenOptions)
  })
}

module.exports = { listenServer }
