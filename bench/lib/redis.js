'use strict'

/**
 * Whether a Redis answers at `url`: one connection, one PING, no retries,
 * so a bench can leave out its Redis rows quickly when there is none.
 * @param {string} url
 * @returns {Promise<boolean>}
 */
async function redisReachable (url) {
  const Redis = require('ioredis')
  const client = new Redis(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000 })
  client.on('error', () => {})
  try {
    await client.connect()
    await client.ping()
    return true
  } catch {
    return false
  } finally {
    client.disconnect()
  }
}

module.exports = { redisReachable }
