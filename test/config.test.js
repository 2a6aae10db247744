'use strict'

const { test } = require('node:test')
const assert = require('node:assert')
const cluster = require('cluster')
const { clusterize, ClusterizeOptionError } = require('..')
const { resolveConfig } = require('../lib/config')

test('bad options fail fast with a message naming the option and what it accepts', () => {
  const cases = [
    [{ workers: -1 }, /option "workers" must be .*'auto'.*got -1/],
    [{ port: 'x' }, /option "port" must be an integer from 0 to 65535, got "x"/],
    [{ colour: 'red' }, /unknown option "colour" \(accepted: port, host, workers/],
    [{ scheduling: 'random' }, /option "scheduling" must be one of 'rr', 'none', 'reuseport', 'sticky', got "random"/],
    [{ health: { heartbeatMs: 0 } }, /option "health.heartbeatMs"/],
    [{ health: { hearbeatMs: 10 } }, /unknown option "health.hearbeatMs"/],
    [{ restart: { maxCrashes: 0 } }, /option "restart.maxCrashes"/],
    [{ shutdown: { signals: ['SIGNOPE'] } }, /option "shutdown.signals"/],
    [{ logger: { info () {} } }, /option "logger" must have an warn\(\) method/],
    [{ bus: { serialization: 'xml' } }, /option "bus.serialization"/]
  ]
  for (const [options, message] of cases) {
    assert.throws(() => resolveConfig(options, {}), (err) => err instanceof ClusterizeOptionError && message.test(err.message), JSON.stringify(options))
  }
})

test('clusterize() throws before forking anything', () => {
  const before = Object.keys(cluster.workers || {}).length
  assert.throws(() => clusterize(() => null, { workers: -1 }), ClusterizeOptionError)
  assert.throws(() => clusterize(42), /first argument must be a function/)
  assert.strictEqual(Object.keys(cluster.workers || {}).length, before)
})

test('environment fallbacks: PORT and WORKERS; defaults for keep-alive', () => {
  const config = resolveConfig({}, { PORT: '8080', WORKERS: '3' })
  assert.strictEqual(config.port, 8080)
  assert.strictEqual(config.workers, 3)
  assert.strictEqual(config.keepAliveTimeout, 65000)
  assert.strictEqual(config.headersTimeout, 66000)
  assert.ok(resolveConfig({}, {}).workers >= 1, "'auto' gives at least one worker")
  assert.strictEqual(resolveConfig({ port: 9000 }, { PORT: '8080' }).port, 9000, 'options win over env')
})
