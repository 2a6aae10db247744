'use strict'

/**
 * A warm spare's warm-up: a few requests through Node's own HTTP server and
 * client on a private loopback port, so that the code a first request runs
 * (sockets, the HTTP parser, responses) is compiled before the spare is
 * promoted rather than on the first client's time. The app is not called:
 * a request to it could have effects.
 */

const http = require('http')
const debug = require('debug')('clusterize:spares')

const REQUESTS = 3

/** @returns {Promise<void>} resolves when done; never rejects (a failed warm-up only costs the first request some time) */
function warmUpHttp () {
  return new Promise(function runWarmUp (resolve) {
    const server = http.createServer(function answer (req, res) {
      res.setHeader('content-type', 'text/plain')
      res.end('ok')
    })
    const finish = (err) => {
      if (err) debug('warm-up skipped: %s', err.message)
      server.close(() => resolve())
      server.closeAllConnections()
    }
    server.once('error', finish)
    server.listen(0, '127.0.0.1', async function onListening () {
      const agent = new http.Agent({ keepAlive: false })
      try {
        for (let i = 0; i < REQUESTS; i++) await get(server.address().port, agent)
        finish()
      } catch (err) {
        finish(err)
      } finally {
        agent.destroy()
      }
    })
  })
}

function get (port, agent) {
  return new Promise(function request (resolve, reject) {
    http.get({ host: '127.0.0.1', port, path: '/', agent }, function onResponse (res) {
      res.resume()
      res.once('end', resolve)
    }).once('error', reject)
  })
}

module.exports = { warmUpHttp }
