'use strict'

// The Redis targets accepted by session({ redis }) and bus.redis, and the
// startup errors for malformed ones (no Redis needed: nothing connects here).

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { Redis, Cluster } = require('ioredis')
const { parseRedisTarget, describeRedisTarget } = require('../lib/redis/target')
const { resolveConfig } = require('../lib/config')
const { session } = require('..')

test('URL forms: one node, Sentinel and Cluster, with credentials, database and TLS', () => {
  assert.deepEqual(parseRedisTarget('redis://:pw@10.0.0.1:6380/2', 'redis'), { kind: 'node', url: 'redis://:pw@10.0.0.1:6380/2' })
  assert.deepEqual(parseRedisTarget('redis+sentinel://app:pw@10.0.0.1,10.0.0.2:26380/mymaster/3?sentinelPassword=s3', 'redis'), {
    kind: 'sentinel',
    options: { sentinels: [{ host: '10.0.0.1', port: 26379 }, { host: '10.0.0.2', port: 26380 }], name: 'mymaster', username: 'app', password: 'pw', db: 3, sentinelPassword: 's3' }
  })
  assert.deepEqual(parseRedisTarget('redis-sentinel://[::1]:26379/m', 'redis').options.sentinels, [{ host: '::1', port: 26379 }])
  const tls = parseRedisTarget('rediss+sentinel://h/m', 'redis').options
  assert.deepEqual([tls.tls, tls.sentinelTLS, tls.enableTLSForSentinelMode], [{}, {}, true])
  assert.deepEqual(parseRedisTarget('redis+cluster://:pw@10.0.0.1:7000,10.0.0.2', 'redis'), {
    kind: 'cluster', nodes: [{ host: '10.0.0.1', port: 7000 }, { host: '10.0.0.2', port: 6379 }], options: { redisOptions: { password: 'pw' } }
  })
  assert.deepEqual(parseRedisTarget('rediss-cluster://h:7000', 'redis').options, { redisOptions: { tls: {} } })
})

test('object forms: node options, Sentinel options, node lists, { nodes }, and clients', () => {
  assert.equal(parseRedisTarget({ host: 'h', port: 1 }, 'redis').kind, 'node')
  assert.equal(parseRedisTarget({ sentinels: [{ host: 'h', port: 26379 }], name: 'm' }, 'redis').kind, 'sentinel')
  assert.deepEqual(parseRedisTarget(['h:7000', 7001, { host: 'k', port: 7002 }, 'redis://j:7003'], 'redis').nodes,
    [{ host: 'h', port: 7000 }, { host: '127.0.0.1', port: 7001 }, { host: 'k', port: 7002 }, { host: 'j', port: 7003 }])
  const cluster = parseRedisTarget({ nodes: ['h:7000'], scaleReads: 'slave' }, 'redis')
  assert.deepEqual(cluster, { kind: 'cluster', nodes: [{ host: 'h', port: 7000 }], options: { scaleReads: 'slave' } })
  const redis = new Redis({ lazyConnect: true })
  const ioCluster = new Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true })
  try {
    assert.equal(parseRedisTarget(redis, 'redis').kind, 'client')
    assert.equal(parseRedisTarget(ioCluster, 'redis').kind, 'cluster-client')
  } finally {
    redis.disconnect()
    ioCluster.disconnect()
  }
})

test('malformed targets fail at startup naming the option, without the password', () => {
  const cases = [
    ['localhost:6379', /option "bus.redis" must be a redis:\/\/.*a URL needs its scheme/],
    ['http://h:1', /must be a redis:\/\/, rediss:\/\/, redis\+sentinel:\/\/ or redis\+cluster:\/\/ URL/],
    ['redis+sentinel://:secret@h:26379', /needs the monitored name as its path/],
    ['redis+sentinel://h/m?role=slave', /unknown query parameter "role"/],
    ['redis+cluster://h:7000/5', /a Redis Cluster has only database 0/],
    ['redis+cluster://h:99999', /port 99999 .*outside 1-65535/],
    ['redis+cluster://', /names no host/],
    [[], /lists no Redis Cluster node/],
    [[{ host: 1 }], /lists the Redis Cluster node/],
    [{ sentinels: [] }, /`sentinels` must be a non-empty list/],
    [{ sentinels: [{ host: 'h', port: 26379 }] }, /without `name`/],
    [{ name: 'mymaster' }, /has `name` but no `sentinels`/],
    [{ nodes: 'h:7000' }, /`nodes` must be a list/],
    [42, /got number/]
  ]
  for (const [value, message] of cases) {
    assert.throws(() => resolveConfig({ bus: { redis: value } }), (err) => {
      assert.equal(err.code, 'ERR_CLUSTERIZE_CONFIG_OPTION')
      assert.equal(err.option, 'bus.redis')
      assert.match(err.message, message)
      assert.doesNotMatch(err.message, /secret/)
      return true
    }, `bus.redis ${JSON.stringify(value)}`)
  }
  assert.throws(() => session({ secret: 's'.repeat(32), redis: 'redis+cluster://h:7000/5' }), /session: option "redis" \("redis\+cluster:\/\/h:7000\/5"\): a Redis Cluster has only database 0/)
})

test('a node-redis client is refused at startup, naming the option and what to pass instead (it was read as ioredis options: localhost:6379)', () => {
  const { createClient, createCluster } = require('redis')
  // Built, never connected: nothing here needs a server.
  const client = createClient({ url: 'redis://:hunter2@10.9.8.7:6390' })
  const nodeCluster = createCluster({ rootNodes: [{ url: 'redis://10.9.8.7:7000' }] })
  for (const value of [client, nodeCluster]) {
    assert.throws(() => session({ secret: 's'.repeat(32), store: 'redis', redis: value }), (err) => {
      assert.equal(err.code, 'ERR_CLUSTERIZE_CONFIG_OPTION')
      assert.equal(err.option, 'redis')
      assert.match(err.message, /^session: option "redis" is a node-redis client \(package "redis"\).*Pass its URL instead.*ioredis.*`store` option/)
      assert.doesNotMatch(err.message, /hunter2/)
      return true
    })
    assert.throws(() => resolveConfig({ bus: { redis: value } }), (err) => {
      assert.equal(err.option, 'bus.redis')
      assert.match(err.message, /option "bus.redis" is a node-redis client/)
      assert.doesNotMatch(err.message, /`store`/)
      return true
    })
  }
  assert.throws(() => parseRedisTarget(client, 'redis', 'session'), /this client's is "redis:\/\/:\*\*\*@10\.9\.8\.7:6390"/)
  // Any other object that is not plain options is refused too, rather than read as options.
  assert.throws(() => parseRedisTarget(new URL('redis://h:1'), 'bus.redis'), /option "bus.redis" is a URL instance, neither ioredis options nor an ioredis client/)
})

test('descriptions for logs carry no password', () => {
  assert.equal(describeRedisTarget(parseRedisTarget('redis://u:pw@h:1', 'r')), 'redis://u:***@h:1')
  assert.equal(describeRedisTarget(parseRedisTarget('redis+sentinel://:pw@a:1,b:2/m', 'r')), 'sentinel "m" via a:1,b:2')
  assert.equal(describeRedisTarget(parseRedisTarget(['a:1', 'b:2'], 'r')), 'cluster via a:1,b:2')
})
