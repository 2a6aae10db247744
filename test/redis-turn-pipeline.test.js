'use strict'

/**
 * lib/redis/turn-pipeline.js on a private redis-server: one pipeline per
 * event-loop turn, each caller answered with its own reply or error, and a
 * later turn written while an earlier one is unanswered (Redis is held with
 * CLIENT PAUSE, so no reply can arrive before the second write).
 */

const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const Redis = require('ioredis')
const { TurnPipeline } = require('../lib/redis/turn-pipeline')
const { privateRedisForSuite, redisServerSuite } = require('./helpers/redis')

/** A client whose pipeline() calls are recorded: [{ at, commands }] */
function recordedClient (url, options) {
  const client = new Redis(url, options)
  client.on('error', () => {}) // the last test closes its connection on purpose
  const pipelines = []
  const pipeline = client.pipeline
  client.pipeline = function recordedPipeline (commands) {
    pipelines.push({ at: performance.now(), commands: commands.map((c) => c[0]) })
    return pipeline.apply(this, arguments)
  }
  return { client, pipelines }
}

function nextTurn () {
  return new Promise((resolve) => setImmediate(resolve))
}

describe('TurnPipeline', redisServerSuite('TurnPipeline suite', 30000), () => {
  const server = privateRedisForSuite()

  it('writes the commands of one turn as one pipeline and answers each caller with its own reply', async () => {
    const { client, pipelines } = recordedClient(server.url)
    try {
      const commands = new TurnPipeline(client)
      const answers = await Promise.all([
        commands.send('set', ['turn:a', '1']),
        commands.send('set', ['turn:b', '2', 'PX', 60000]),
        commands.send('get', ['turn:b']),
        commands.send('get', ['turn:a']),
        commands.send('get', ['turn:missing'])
      ])
      assert.deepEqual(answers, ['OK', 'OK', '2', '1', null])
      assert.deepEqual(pipelines.map((p) => p.commands), [['set', 'set', 'get', 'get', 'get']])
    } finally {
      client.disconnect()
    }
  })

  it('sends a lone command as itself, not as a pipeline', async () => {
    const { client, pipelines } = recordedClient(server.url)
    try {
      const commands = new TurnPipeline(client)
      assert.equal(await commands.send('set', ['turn:lone', 'x']), 'OK')
      assert.equal(await commands.send('get', ['turn:lone']), 'x')
      assert.equal(pipelines.length, 0)
    } finally {
      client.disconnect()
    }
  })

  it('fails only the command Redis refused', async () => {
    const { client } = recordedClient(server.url)
    try {
      await client.del('turn:list')
      await client.lpush('turn:list', 'item')
      const commands = new TurnPipeline(client)
      const outcomes = await Promise.allSettled([
        commands.send('set', ['turn:c', '3']),
        commands.send('get', ['turn:list']),
        commands.send('get', ['turn:c'])
      ])
      assert.deepEqual(outcomes.map((o) => o.status), ['fulfilled', 'rejected', 'fulfilled'])
      assert.match(outcomes[1].reason.message, /WRONGTYPE/)
      assert.equal(outcomes[2].value, '3')
    } finally {
      client.disconnect()
    }
  })

  it('writes a later turn while an earlier one is still unanswered', async () => {
    const { client, pipelines } = recordedClient(server.url)
    try {
      await client.ping()
      const commands = new TurnPipeline(client)
      let firstReplyAt = null
      assert.equal(await server.admin.client('PAUSE', 400, 'ALL'), 'OK')
      const first = Promise.all([commands.send('get', ['turn:p1']), commands.send('get', ['turn:p2'])])
        .then((value) => { firstReplyAt = performance.now(); return value })
      await nextTurn()
      await nextTurn()
      const second = Promise.all([commands.send('get', ['turn:p3']), commands.send('get', ['turn:p4'])])
      await Promise.all([first, second])
      assert.equal(pipelines.length, 2)
      assert.ok(pipelines[1].at < firstReplyAt, 'the second turn was written before the first got its replies')
    } finally {
      await server.admin.client('UNPAUSE').catch(() => {})
      client.disconnect()
    }
  })

  it('rejects every queued command when the connection is gone', async () => {
    const { client } = recordedClient(server.url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
    await new Promise((resolve) => client.once('ready', resolve))
    client.disconnect()
    const commands = new TurnPipeline(client)
    const outcomes = await Promise.allSettled([commands.send('get', ['turn:x']), commands.send('get', ['turn:y'])])
    assert.deepEqual(outcomes.map((o) => o.status), ['rejected', 'rejected'])
  })
})
