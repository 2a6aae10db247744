'use strict'

const net = require('net')

/**
 * A TCP proxy on loopback in front of one cluster: cut() closes every
 * connection through it and holds new ones; release(port) sends them, and
 * every later one, to the cluster on `port`. What a load balancer does when a
 * host goes away. The caller closes it (close()).
 * @param {number} port
 * @returns {Promise<{ port: number, cut: Function, release: (port: number) => void, close: () => Promise<void> }>}
 */
async function createTcpProxy (port) {
  const pairs = new Set()
  const proxy = { target: port, held: null }
  const server = net.createServer((client) => {
    client.on('error', () => {})
    if (proxy.held !== null) {
      client.pause()
      proxy.held.push(client)
    } else {
      forward(client)
    }
  })
  function forward (client) {
    if (client.destroyed) return
    const upstream = net.connect(proxy.target, '127.0.0.1')
    upstream.on('error', () => {})
    const pair = [client, upstream]
    pairs.add(pair)
    const close = () => {
      pairs.delete(pair)
      client.destroy()
      upstream.destroy()
    }
    client.once('close', close)
    upstream.once('close', close)
    client.pipe(upstream)
    upstream.pipe(client)
    client.resume()
  }
  proxy.cut = () => {
    proxy.held = []
    for (const [client, upstream] of pairs) {
      client.destroy()
      upstream.destroy()
    }
  }
  proxy.release = (port) => {
    proxy.target = port
    const held = proxy.held || []
    proxy.held = null
    for (const client of held) forward(client)
  }
  proxy.close = () => new Promise((resolve) => {
    for (const [client, upstream] of pairs) {
      client.destroy()
      upstream.destroy()
    }
    server.close(() => resolve())
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  proxy.port = server.address().port
  return proxy
}

module.exports = { createTcpProxy }
