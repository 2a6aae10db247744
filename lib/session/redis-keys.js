'use strict'

/**
 * The sessions under one prefix, as sets of keys: what clear, length and all
 * need. On one node (or a Sentinel-managed primary) that is SCAN, MGET and
 * DEL. On a Redis Cluster the keys are spread over slots held by different
 * masters: one SCAN sees one node's keys and a multi-key MGET or DEL fails
 * with CROSSSLOT, so we scan every master and read or delete key by key
 * (ioredis routes each to its slot's master and pipelines them).
 */

const SCAN_COUNT = 100
/** Keys per MGET or DEL on one node: a huge clear() is several commands, not one giant one. */
const BATCH = 500

/**
 * @param {import('ioredis').Redis|import('ioredis').Cluster} client
 * @param {boolean} isCluster
 * @returns {{ list: (prefix: string) => Promise<string[]>, read: (keys: string[]) => Promise<(string|null)[]>,
 *   remove: (keys: string[]) => Promise<void> }}
 */
function sessionKeys (client, isCluster) {
  return {
    list: function listKeys (prefix) {
      const match = escapeGlob(prefix) + '*'
      return isCluster ? scanEveryMaster(client, match) : scanNode(client, match)
    },
    read: function readKeys (keys) {
      if (isCluster) return Promise.all(keys.map((key) => client.get(key)))
      return inBatches(keys, (batch) => client.mget(batch))
    },
    remove: async function removeKeys (keys) {
      if (isCluster) await Promise.all(keys.map((key) => client.del(key)))
      else await inBatches(keys, async (batch) => { await client.del(batch); return [] })
    }
  }
}

async function scanNode (node, match, seen = new Set()) {
  const keys = []
  let cursor = '0'
  do {
    const [next, found] = await node.scan(cursor, 'MATCH', match, 'COUNT', SCAN_COUNT)
    cursor = next
    for (const key of found) {
      // SCAN may return a key twice (a rehash during the scan; a failover on a Cluster).
      if (seen.has(key)) continue
      seen.add(key)
      keys.push(key)
    }
  } while (cursor !== '0')
  return keys
}

async function scanEveryMaster (cluster, match) {
  const seen = new Set()
  const keys = []
  for (const node of cluster.nodes('master')) keys.push(...await scanNode(node, match, seen))
  return keys
}

async function inBatches (keys, run) {
  const out = []
  for (let i = 0; i < keys.length; i += BATCH) out.push(...await run(keys.slice(i, i + BATCH)))
  return out
}

/** A prefix is matched literally, even one with *, ?, [ or \ in it. */
function escapeGlob (text) {
  return text.replace(/[*?[\]\\]/g, '\\$&')
}

module.exports = { sessionKeys, escapeGlob }
