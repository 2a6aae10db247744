import { test } from 'node:test'
import assert from 'node:assert'
import { clusterize, offload, session, bus, ClusterizeOptionError } from 'clusterize-express'
import cjs from 'clusterize-express'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

test('ESM consumers get the same objects as CommonJS consumers', () => {
  const fromRequire = require('clusterize-express')
  assert.strictEqual(typeof clusterize, 'function')
  assert.strictEqual(clusterize, fromRequire.clusterize)
  assert.strictEqual(offload, fromRequire.offload)
  assert.strictEqual(session, fromRequire.session)
  assert.strictEqual(bus, fromRequire.bus)
  assert.strictEqual(cjs, fromRequire)
  assert.throws(() => clusterize(() => null, { workers: 'many' }), ClusterizeOptionError)
})
