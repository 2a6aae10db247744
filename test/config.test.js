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
    [{ scheduling: 'random' }, /option "scheduling" must be one of 'rr', 'none', 'reuseport', 'sticky', 'balanced', got "random"/],
    [{ health: { heartbeatMs: 0 } }, /option "health.heartbeatMs"/],
    [{ health: { hearbeatMs: 10 } }, /unknown option "health.hearbeatMs"/],
    [{ restart: { maxCrashes: 0 } }, /option "restart.maxCrashes"/],
    [{ shutdown: { signals: ['SIGNOPE'] } }, /option "shutdown.signals"/],
    [{ logger: { info () {} } }, /option "logger" must have an warn\(\) method/],
    [{ bus: { serialization: 'xml' } }, /option "bus.serialization"/],
    [{ bus: { stallTimeoutMs: 0 } }, /option "bus.stallTimeoutMs"/],
    [{ bus: { stallTimeoutMs: '5s' } }, /option "bus.stallTimeoutMs"/],
    [{ bus: { outageBufferBytes: -1 } }, /option "bus.outageBufferBytes"/],
    [{ bus: { outageBufferBytes: 1.5 } }, /option "bus.outageBufferBytes"/]
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
  assert.strictEqual(resolveConfig({}, {}).scheduling, undefined, 'not given: the primary picks the default (defaultScheduling)')
  assert.strictEqual(resolveConfig({ scheduling: 'balanced' }, {}).scheduling, 'balanced')
})

test('every time option is bounded by what a timer can hold (2^31-1 ms): 3e9 fails at startup naming the option', () => {
  const tooLong = 3e9
  const options = [
    ['health.heartbeatMs', { health: { heartbeatMs: tooLong, heartbeatTimeoutMs: tooLong + 1 } }],
    ['health.heartbeatTimeoutMs', { health: { heartbeatTimeoutMs: tooLong } }],
    ['restart.backoffInitialMs', { restart: { backoffInitialMs: tooLong, backoffMaxMs: tooLong } }],
    ['restart.backoffMaxMs', { restart: { backoffMaxMs: tooLong } }],
    ['restart.crashWindowMs', { restart: { crashWindowMs: tooLong } }],
    ['reload.readyTimeoutMs', { reload: { readyTimeoutMs: tooLong } }],
    ['reload.drainTimeoutMs', { reload: { drainTimeoutMs: tooLong } }],
    ['reload.bakeMs', { reload: { bakeMs: tooLong } }],
    ['reload.heartbeatTimeoutMs', { reload: { heartbeatTimeoutMs: tooLong } }],
    ['shutdown.timeoutMs', { shutdown: { timeoutMs: tooLong } }],
    ['keepAliveTimeout', { keepAliveTimeout: tooLong }],
    ['headersTimeout', { headersTimeout: tooLong }]
  ]
  for (const [name, value] of options) {
    assert.throws(() => resolveConfig(value, {}), (err) => err instanceof ClusterizeOptionError && err.option === name && /2147483647|2147481647/.test(err.message), name)
  }
  assert.strictEqual(resolveConfig({ reload: { readyTimeoutMs: 2147483647 } }, {}).reload.readyTimeoutMs, 2147483647, 'the limit itself is accepted')
  assert.throws(() => clusterize(() => null, { reload: { readyTimeoutMs: tooLong } }), /reload\.readyTimeoutMs/)

  const offload = require('../middleware/offload')
  assert.throws(() => offload.pool({ taskTimeoutMs: tooLong }), /taskTimeoutMs.*2147483647/)
  const { resolveSessionOptions } = require('../lib/session/options')
  assert.throws(() => resolveSessionOptions({ timeoutMs: tooLong, secret: 'x'.repeat(32) }, {}), /timeoutMs.*2147483647/)
  // Durations in seconds: the same figure, 2^31-1 s, as a sanity bound (a Redis EXPIRE, a Retry-After).
  for (const key of ['ttl', 'retryAfter']) {
    assert.throws(() => resolveSessionOptions({ [key]: 2147483648, secret: 'x'.repeat(32) }, {}),
      (err) => err instanceof ClusterizeOptionError && err.option === key && /from 1 to 2147483647 \(seconds\)/.test(err.message), key)
    assert.strictEqual(resolveSessionOptions({ [key]: 2147483647, secret: 'x'.repeat(32) }, {})[key], 2147483647)
  }
  const { parseArgs } = require('../lib/cli/args')
  assert.throws(() => parseArgs(['stop', '--timeout', '3000000']), /--timeout must be a number of seconds from 0 to 2147483/)
})

test('one validation toolkit: every option error is a ClusterizeOptionError naming the option', () => {
  const offload = require('../middleware/offload')
  const session = require('../middleware/session')
  const cases = [
    [() => resolveConfig({ reload: { batch: 0 } }, {}), 'reload.batch'],
    // SIGUSR2 is the reload's: one signal cannot do both.
    [() => resolveConfig({ upgrade: { signal: 'SIGUSR2' } }, {}), 'upgrade.signal'],
    [() => resolveConfig({ upgrade: { timeoutMs: 0 } }, {}), 'upgrade.timeoutMs'],
    [() => offload.pool({ threads: 0 }), 'threads'],
    [() => offload({ niceness: 42 }), 'niceness'],
    [() => session({ secret: 'x'.repeat(32), ttl: -5 }), 'ttl']
  ]
  for (const [make, option] of cases) {
    assert.throws(make, (err) => err instanceof ClusterizeOptionError && err.option === option && err.message.includes(`"${option}"`), option)
  }
  assert.throws(() => offload.pool({ threads: 0 }), (err) => err.name === 'OffloadOptionError' && err.code === 'ERR_CLUSTERIZE_OFFLOAD_OPTION', 'the offload subclass keeps its name and code')
})

test('the loopback check parses the address: a DNS name that starts with 127. is not loopback', () => {
  const { isLoopback } = require('../lib/config')
  for (const host of ['localhost', '127.0.0.1', '127.8.9.10', '::1', '[::1]', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1']) {
    assert.strictEqual(isLoopback(host), true, host)
  }
  for (const host of ['127.attacker.example', '127.0.0.1.nip.io', 'localhost.attacker.example', '0.0.0.0', '::', '10.0.0.1', '::ffff:10.0.0.1', '127.0.0.1 ']) {
    assert.strictEqual(isLoopback(host), false, host)
  }
  assert.throws(() => resolveConfig({ probes: { port: 0, host: '127.attacker.example', dashboard: true } }, {}),
    (err) => err instanceof ClusterizeOptionError && err.option === 'probes.token' && /non-loopback/.test(err.message))
  assert.strictEqual(resolveConfig({ probes: { port: 0, host: '127.attacker.example' } }, {}).probes.dashboard, false, 'off by default on a DNS name')
  assert.strictEqual(resolveConfig({ probes: { port: 0, host: '::1' } }, {}).probes.dashboard, true)
})

test("maxIdleConnections: 'auto' is half the open-file soft limit from /proc/self/limits (1024 where unknown); bad values fail naming it", () => {
  const { fdSoftLimit, defaultMaxIdleConnections } = require('../lib/fd-limit')
  const limits = 'Limit                     Soft Limit           Hard Limit           Units     \n' +
    'Max processes             63439                63439                processes \n' +
    'Max open files            1024                 524288               files     \n'
  assert.strictEqual(fdSoftLimit(limits), 1024)
  assert.strictEqual(fdSoftLimit(limits.replace('1024  ', 'unlimited')), null)
  assert.strictEqual(defaultMaxIdleConnections(1024), 512)
  assert.strictEqual(defaultMaxIdleConnections(null), 1024)
  assert.strictEqual(defaultMaxIdleConnections(20), 16, 'never below 16')
  assert.strictEqual(resolveConfig({}, {}).maxIdleConnections, defaultMaxIdleConnections())
  assert.strictEqual(resolveConfig({ maxIdleConnections: 300 }, {}).maxIdleConnections, 300)
  for (const bad of [0, -1, 1.5, 'many', null]) {
    assert.throws(() => resolveConfig({ maxIdleConnections: bad }, {}), (err) => err.option === 'maxIdleConnections' && /'auto' or an integer >= 1/.test(err.message), String(bad))
  }
})

test('explicitServerTimeouts: which server timeouts the options set (the app\'s own stay otherwise)', () => {
  assert.deepStrictEqual(resolveConfig({}, {}).explicitServerTimeouts, [])
  assert.deepStrictEqual(resolveConfig({ headersTimeout: 5000 }, {}).explicitServerTimeouts, ['headersTimeout'])
})

test('reload.heartbeatTimeoutMs: three heartbeats, at least 3 s, at most the hang timeout; it must exceed heartbeatMs', () => {
  assert.strictEqual(resolveConfig({}, {}).reload.heartbeatTimeoutMs, 3000, 'inside the default 5 s bake')
  assert.strictEqual(resolveConfig({ health: { heartbeatMs: 2000 } }, {}).reload.heartbeatTimeoutMs, 6000)
  assert.strictEqual(resolveConfig({ health: { heartbeatMs: 100, heartbeatTimeoutMs: 1500 } }, {}).reload.heartbeatTimeoutMs, 1500)
  assert.strictEqual(resolveConfig({ reload: { heartbeatTimeoutMs: 2500 } }, {}).reload.heartbeatTimeoutMs, 2500)
  assert.throws(() => resolveConfig({ reload: { heartbeatTimeoutMs: 1000 } }, {}),
    (err) => err instanceof ClusterizeOptionError && err.option === 'reload.heartbeatTimeoutMs' && /greater than health.heartbeatMs \(1000\)/.test(err.message))
  assert.throws(() => resolveConfig({ reload: { heartbeatTimeoutMs: 'soon' } }, {}), (err) => err.option === 'reload.heartbeatTimeoutMs')
})
