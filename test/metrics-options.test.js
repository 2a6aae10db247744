'use strict'

const { test } = require('node:test')
const assert = require('node:assert')
const client = require('prom-client')
const { ClusterizeOptionError } = require('..')
const { resolveConfig } = require('../lib/config')

test('metrics options: defaults, false, and bad values that fail at startup naming the option', () => {
  assert.deepStrictEqual(resolveConfig({}, {}).metrics, { registries: undefined, timeoutMs: 1000, pushIntervalMs: 1000 })
  assert.strictEqual(resolveConfig({ metrics: false }, {}).metrics, false)
  const registries = [client.register]
  assert.strictEqual(resolveConfig({ metrics: { registries } }, {}).metrics.registries, registries)
  const cases = [
    [{ metrics: { registries: ['default'] } }, 'metrics.registries'],
    [{ metrics: { registries: client.register } }, 'metrics.registries'],
    [{ metrics: { timeoutMs: 0 } }, 'metrics.timeoutMs'],
    [{ metrics: { timeoutMs: 3e9 } }, 'metrics.timeoutMs'],
    [{ metrics: { pushIntervalMs: 10 } }, 'metrics.pushIntervalMs'],
    [{ metrics: { interval: 10 } }, 'metrics.interval'],
    [{ metrics: true }, 'metrics']
  ]
  for (const [options, name] of cases) {
    assert.throws(() => resolveConfig(options, {}), (err) => err instanceof ClusterizeOptionError && err.option === name, JSON.stringify(options))
  }
})
