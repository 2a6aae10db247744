'use strict'

// `import 'clusterize-express'` must load no more than `require` does: a
// primary needs neither express-session, connect-redis nor the thread pool.

const { test } = require('node:test')
const assert = require('node:assert')
const { execFileSync } = require('child_process')
const path = require('path')

const REPO = path.join(__dirname, '..')

// Each child prints the modules in require.cache (ESM imports of CommonJS
// files land there too), relative to the package, after loading the entry.
const LIST = "JSON.stringify(Object.keys(require.cache).map((f) => path.relative(root, f)).sort())"
const BY_REQUIRE = `const path = require('path'); const root = process.cwd(); require('clusterize-express'); console.log(${LIST})`
const BY_IMPORT = `import { createRequire } from 'node:module'; import path from 'node:path'; import 'clusterize-express'; ` +
  `const require = createRequire(import.meta.url); const root = process.cwd(); console.log(${LIST})`

function loaded (args) {
  return JSON.parse(execFileSync(process.execPath, args, { cwd: REPO, encoding: 'utf8', timeout: 30000 }))
}

test('import loads the same modules as require, and neither loads express-session, connect-redis or the pool', () => {
  const byRequire = loaded(['-e', BY_REQUIRE])
  const byImport = loaded(['--input-type=module', '-e', BY_IMPORT])
  assert.deepStrictEqual(byImport, byRequire, `import loads ${byImport.length} modules, require ${byRequire.length}; ` +
    `only by import: ${byImport.filter((f) => !byRequire.includes(f)).join(', ')}`)
  for (const heavy of [/node_modules\/express-session\//, /node_modules\/connect-redis\//, /node_modules\/ioredis\//, /^middleware\//, /^lib\/pool\/index\.js$/, /^lib\/session\/(create-store|redis-store)\.js$/, /^lib\/state\//, /node_modules\/(express-rate-limit|node-cron)\//]) {
    assert.ok(!byImport.some((f) => heavy.test(f)), `import 'clusterize-express' loaded ${byImport.filter((f) => heavy.test(f)).join(', ')}`)
  }
})

test('the ESM entry exports every name of the CommonJS entry, with the same values, loaded on first use', async () => {
  const cjs = require('..')
  const esm = await import('clusterize-express')
  assert.deepStrictEqual(Object.keys(esm).filter((k) => k !== 'default').sort(), Object.keys(cjs).sort())
  for (const key of Object.keys(cjs)) assert.strictEqual(esm[key], cjs[key], key)
  // The stand-ins behave as what they stand for.
  const script = "import { offload, session, bus } from 'clusterize-express'; import { createRequire } from 'node:module'; " +
    "const require = createRequire(import.meta.url); const before = Object.keys(require.cache).some((f) => f.includes('express-session')); " +
    'const out = { before, offload: typeof offload, pool: typeof offload.pool, task: typeof offload.task, errors: Object.keys(offload.errors).length, ' +
    "session: typeof session, status: session.status(), role: bus.role, on: typeof bus.on, after: Object.keys(require.cache).some((f) => f.includes('express-session')) }; " +
    'const mw = offload({ threads: 1 }); out.middleware = typeof mw; out.stats = typeof mw.stats().threads; await mw.close(); console.log(JSON.stringify(out))'
  const out = loaded(['--input-type=module', '-e', script])
  assert.deepStrictEqual(out, {
    before: false,
    offload: 'function',
    pool: 'function',
    task: 'function',
    errors: 12,
    session: 'function',
    status: null,
    role: 'none',
    on: 'function',
    after: true,
    middleware: 'function',
    stats: 'number'
  })
})

test('a lazy stand-in loads once, on first use, and says so when inspected before', () => {
  const util = require('util')
  const { lazyValue } = require('../lib/lazy')
  let loads = 0
  let failNext = true
  const real = Object.assign(function greet (who) { return `hello ${who}` }, { version: 2 })
  const fn = lazyValue('greet', () => {
    loads++
    if (failNext) {
      failNext = false
      throw new Error('not installed')
    }
    return real
  })
  assert.strictEqual(typeof fn, 'function')
  assert.strictEqual(util.inspect(fn), '[greet: loads on first use]')
  assert.strictEqual(loads, 0, 'neither typeof nor inspect loads it')
  // A load that fails is tried again on the next use, not remembered as loaded.
  assert.throws(() => fn('a'), /not installed/)
  assert.strictEqual(fn('b'), 'hello b')
  assert.strictEqual(fn.version, 2)
  assert.deepStrictEqual(Object.keys(fn), ['version'])
  assert.strictEqual(fn.call(null, 'c'), 'hello c')
  assert.strictEqual(loads, 2)
  assert.match(util.inspect(fn), /\[Function: greet\]/)

  const obj = lazyValue('thing', () => ({ role: 'x', get live () { return this.role } }), 'object')
  assert.strictEqual(typeof obj, 'object')
  assert.strictEqual(obj.live, 'x', 'getters run on the loaded object')
  assert.ok('role' in obj)
})
