'use strict'

/**
 * lib/redis/availability.js: the one Redis up/down state machine, on real
 * ioredis clients (the shared Redis, and a port where nothing listens).
 */

const { test } = require('node:test')
const assert = require('node:assert')
const net = require('net')
const Redis = require('ioredis')
const { RedisAvailability, RedisGate } = require('../lib/redis/availability')
const { REDIS_URL, redisTestOptions } = require('./helpers/redis')
const { eventually } = require('./helpers/wait')

/** A loopback port nothing listens on (bound, then closed). */
async function deadPort () {
  const server = net.createServer()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

test('transitions: one change per outage and one when it ends; repeated failures only update lastError', () => {
  const changes = []
  const availability = new RedisAvailability({ onChange: (up, cause, from) => changes.push([up, cause, from]) })
  assert.strictEqual(availability.status, 'connecting')
  assert.strictEqual(availability.markDown('ECONNREFUSED'), true)
  assert.strictEqual(availability.markDown('ECONNREFUSED again'), false)
  assert.strictEqual(availability.markUp(), true)
  assert.strictEqual(availability.markUp(), false)
  availability.noteError('publisher: a command failed')
  assert.strictEqual(availability.isUp, true, 'a failed command alone is not an outage')
  assert.strictEqual(availability.markDown('connection closed'), true)
  assert.deepStrictEqual(changes, [[false, 'ECONNREFUSED', 'connecting'], [true, undefined, 'down'], [false, 'connection closed', 'up']])
  assert.strictEqual(availability.lastError, 'connection closed')
  assert.strictEqual(availability.everUp, true)
})

test('follow(): a client that cannot connect is down once, with the cause explained', async () => {
  const client = new Redis({ host: '127.0.0.1', port: await deadPort(), lazyConnect: true, retryStrategy: () => 50, maxRetriesPerRequest: 0 })
  client.on('error', () => {})
  const changes = []
  const availability = new RedisAvailability({ onChange: (up, cause) => changes.push([up, cause]) })
  const unfollow = availability.follow(client, 'command')
  client.connect().catch(() => {})
  await eventually(() => availability.lastError !== null && client.status === 'reconnecting')
  await eventually(() => /ECONNREFUSED/.test(availability.lastError) && changes.length > 0)
  assert.strictEqual(changes.length, 1, 'reconnect attempts are not new outages')
  assert.match(changes[0][1], /^command: .*ECONNREFUSED.*nothing listens there/)
  unfollow()
  client.disconnect()
})

test('follow() and the gate on the shared Redis: up, and commands pass', async (t) => {
  const options = await redisTestOptions()
  if (options.skip) return t.skip(options.skip)
  const client = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false })
  const gate = new RedisGate(client, { timeoutMs: 5000, unavailableError: (reason) => new Error(`unavailable: ${reason}`) })
  // Before the first connection a command waits for it: starting is not an outage.
  assert.deepStrictEqual(gate.state(), { available: true, lastError: null })
  await new Promise((resolve, reject) => gate.check((err) => (err ? reject(err) : resolve())))
  assert.strictEqual(gate.availability.status, 'up')
  gate.stop()
  await client.quit()
})
