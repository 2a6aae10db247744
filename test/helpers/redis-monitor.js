'use strict'

/**
 * For a describe() that counts the commands a store sends to the shared
 * Redis: its options (skip when Redis is unreachable, fail under CI), a key
 * prefix of its own, MONITOR started before its tests, and what it opened
 * closed after them with its keys deleted.
 */

const { before, after } = require('node:test')
const { uniquePrefix, redisTestOptions, deletePrefix, watchCommands } = require('./redis')

/**
 * Call at the top of an async describe() body.
 * @param {string} label in the key prefix
 * @returns {Promise<{ options: object, prefix: string, watch: object|null, track: <T extends { close(): unknown }>(closable: T) => T }>}
 *   `watch` (helpers/redis's watchCommands()) is set once the tests start; `track(x)` closes x after them
 */
async function monitoredRedisSuite (label) {
  const options = await redisTestOptions()
  const opened = []
  const suite = {
    options,
    prefix: uniquePrefix(label),
    watch: null,
    track (closable) {
      opened.push(closable)
      return closable
    }
  }
  before(async () => {
    if (!options.skip) suite.watch = await watchCommands()
  })
  after(async () => {
    for (const closable of opened) await closable.close()
    if (suite.watch) suite.watch.stop()
    if (!options.skip) await deletePrefix(suite.prefix)
  })
  return suite
}

module.exports = { monitoredRedisSuite }
