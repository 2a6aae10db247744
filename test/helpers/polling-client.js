'use strict'

/**
 * A bare engine.io long-polling session (protocol 4) for socket.io tests:
 * the handshake, socket.io's CONNECT, and long-poll GETs under the test's
 * control, so a test can leave a GET pending, or stop half-way through the
 * upgrade to WebSocket, as a client whose network went away does.
 * Loopback only; every request has its own connection (agent: false).
 */

const http = require('http')

const SEPARATOR = '\x1e'

/** One HTTP request; resolves with `{ status, body }`, or `{ error }` if the connection broke. */
function request (port, method, path, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, agent: false, headers: body ? { 'content-type': 'text/plain;charset=UTF-8' } : {} }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { text += chunk })
      res.on('end', () => resolve({ status: res.statusCode, body: text }))
      res.on('error', (error) => resolve({ error }))
    })
    req.on('error', (error) => resolve({ error }))
    req.end(body)
  })
}

/**
 * Open a session and connect to namespace '/'.
 * @param {number} port
 * @returns {Promise<{ sid: string, packets: string[], poll: () => Promise<object>, post: (text: string) => Promise<object> }>}
 *   packets: every engine.io packet the GETs brought, in order
 */
async function openPollingSession (port) {
  const base = '/socket.io/?EIO=4&transport=polling'
  const open = await request(port, 'GET', base)
  if (open.error || open.status !== 200 || open.body[0] !== '0') throw new Error(`no engine.io handshake: ${open.error || open.status + ' ' + open.body}`)
  const sid = JSON.parse(open.body.slice(1)).sid
  const session = {
    sid,
    packets: [],
    path: `${base}&sid=${encodeURIComponent(sid)}`,
    /** A long-poll GET; its packets are added to `packets`. */
    async poll () {
      const answer = await request(port, 'GET', session.path)
      if (answer.body) session.packets.push(...answer.body.split(SEPARATOR))
      return answer
    },
    post: (text) => request(port, 'POST', session.path, text)
  }
  await session.post('40')
  while (!session.packets.some((p) => p.startsWith('40'))) {
    const answer = await session.poll()
    if (answer.error || answer.status !== 200) throw new Error(`socket.io CONNECT not answered: ${answer.error || answer.status}`)
  }
  return session
}

module.exports = { openPollingSession }
