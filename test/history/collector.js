'use strict'

/**
 * The collector: an HTTP server in the test process that records what the
 * workers report, at the moment it arrives, into the history. POST /write
 * { token, pid }: a singleton holder's write, as a fenced downstream sees it.
 * POST /received { receiver, messages: [[sender, seq], ...] }: bus messages
 * a worker received, in its order.
 */

const http = require('http')

/** @returns {Promise<{ port: number, close: () => Promise<void> }>} */
function startCollector (history) {
  const server = http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (chunk) => { body += chunk })
    req.on('end', () => {
      let data
      try { data = JSON.parse(body) } catch { res.statusCode = 400; return res.end() }
      if (req.url === '/write') {
        history.event({ client: String(data.pid), op: 'write', value: { token: data.token, pid: data.pid } })
      } else if (req.url === '/received') {
        for (const [sender, seq] of data.messages) history.event({ client: String(data.receiver), op: 'receive', value: { sender: String(sender), seq } })
      } else {
        res.statusCode = 404
      }
      res.end()
    })
  })
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({
      port: server.address().port,
      close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()) })
    }))
  })
}

module.exports = { startCollector }
