'use strict'

/**
 * One write per event-loop turn for the commands issued in it, without
 * waiting for an earlier write's replies.
 *
 * ioredis's enableAutoPipelining batches too, but it keeps one pipeline in
 * flight per connection: commands issued while one is out wait for all of its
 * replies before they are written (ioredis lib/autoPipelining.ts, "ioredis
 * won't serve two pipelines at the same time"). A request's GET then waits on
 * other requests' round trips, and the tail grows with the load. Redis answers
 * a connection's commands in order whatever the batching, so here each turn's
 * commands go out at the end of the turn as one pipeline (a lone command as
 * itself), however many are still unanswered.
 *
 * Only for a standalone or Sentinel-managed client: a Cluster pipeline must
 * keep to one node, so Cluster clients keep ioredis's auto-pipelining.
 */

const debug = require('debug')('clusterize:redis')

class TurnPipeline {
  /**
   * @param {import('ioredis').Redis} client
   */
  constructor (client) {
    this.client = client
    /** @type {Array<{ name: string, args: Array, resolve: Function, reject: Function }>} */
    this.queue = []
    this.flush = this.flush.bind(this)
  }

  /**
   * Queue a command for the end of this event-loop turn.
   * @param {string} name an ioredis command method (get, set, del, evalsha, ...)
   * @param {Array} args its arguments
   * @returns {Promise<*>} its reply; a Redis error rejects this command only
   */
  send (name, args) {
    return new Promise((resolve, reject) => {
      if (this.queue.length === 0) setImmediate(this.flush)
      this.queue.push({ name, args, resolve, reject })
    })
  }

  flush () {
    const queue = this.queue
    this.queue = []
    if (queue.length === 1) {
      const only = queue[0]
      sendDirect(this.client, only.name, only.args).then(only.resolve, only.reject)
      return
    }
    debug('%d commands in one write', queue.length)
    let pipeline
    try {
      pipeline = this.client.pipeline(queue.map((command) => [command.name].concat(command.args)))
    } catch (err) {
      for (const command of queue) command.reject(err)
      return
    }
    pipeline.exec().then(function answerEach (results) {
      for (let i = 0; i < queue.length; i++) {
        const [err, value] = results[i]
        if (err) queue[i].reject(err)
        else queue[i].resolve(value)
      }
    }, function failEach (err) {
      for (const command of queue) command.reject(err)
    })
  }
}

/**
 * The same interface for a client whose commands go out as ioredis sends them
 * (a Redis Cluster, or a client the user passed in).
 */
class DirectCommands {
  /** @param {import('ioredis').Redis | import('ioredis').Cluster} client */
  constructor (client) {
    this.client = client
  }

  /**
   * @param {string} name
   * @param {Array} args
   * @returns {Promise<*>}
   */
  send (name, args) {
    return sendDirect(this.client, name, args)
  }
}

function sendDirect (client, name, args) {
  try {
    return client[name].apply(client, args)
  } catch (err) {
    return Promise.reject(err)
  }
}

module.exports = { TurnPipeline, DirectCommands }
