'use strict'

/**
 * On a Redis Cluster, session keys are spread over slots held by different
 * masters: one SCAN sees one node's keys, and MGET or a DEL of several keys
 * fails with CROSSSLOT. connect-redis would list and clear only one node's
 * sessions. These replacements for its client wrapper scan every master and
 * read or delete key by key (ioredis sends each to its slot's master).
 */

/**
 * Make connect-redis's normalised client safe for keys on many slots.
 * @param {object} normalized connect-redis's `store.client`
 * @param {import('ioredis').Cluster} cluster
 */
function spreadOverSlots (normalized, cluster) {
  normalized.scanIterator = function scanEveryMaster (match, count) {
    return (async function * keysOnEveryMaster () {
      // A failover during the scan can show a key on two nodes: list it once.
      const seen = new Set()
      for (const node of cluster.nodes('master')) {
        let cursor = '0'
        do {
          const [next, keys] = await node.scan(cursor, 'MATCH', match, 'COUNT', count)
          cursor = next
          for (const key of keys) {
            if (seen.has(key)) continue
            seen.add(key)
            yield key
          }
        } while (cursor !== '0')
      }
    })()
  }
  normalized.mget = function getEach (keys) {
    return Promise.all(keys.map((key) => cluster.get(key)))
  }
  normalized.del = function delEach (keys) {
    if (!Array.isArray(keys)) return cluster.del(keys)
    return Promise.all(keys.map((key) => cluster.del(key))).then((counts) => counts.reduce((sum, n) => sum + n, 0))
  }
}

module.exports = { spreadOverSlots }
