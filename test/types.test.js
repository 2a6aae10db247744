'use strict'

const { test } = require('node:test')
const assert = require('node:assert')
const { spawnSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

const REPO = path.join(__dirname, '..')
const TSC = require.resolve('typescript/bin/tsc')

test('types/index.d.ts compiles for ESM and CommonJS consumers, wrong calls are rejected, and the type assertions hold', () => {
  const result = spawnSync(process.execPath, [TSC, '-p', path.join(__dirname, 'types'), '--noEmit'], { encoding: 'utf8' })
  assert.strictEqual(result.status, 0, result.stdout + result.stderr)
})

/** Every option path of a defaults object: ['port'], ['health', 'heartbeatMs'], ... */
function optionPaths (defaults, prefix = []) {
  return Object.entries(defaults).flatMap(([key, value]) => {
    const here = prefix.concat(key)
    const nested = value !== null && typeof value === 'object' && !Array.isArray(value)
    return nested ? [here, ...optionPaths(value, here)] : [here]
  })
}

/** `NonNullable<NonNullable<T>['a']>['b']`: fails to compile when a key has no type. */
function typeAt (typeName, keys) {
  // false too: an option group that `false` turns off (metrics) still types its keys.
  return keys.reduce((expr, key) => `Exclude<${expr}, null | undefined | false>[${JSON.stringify(key)}]`, typeName)
}

test('every option the library accepts has a type in types/index.d.ts', (t) => {
  const { DEFAULTS } = require('../lib/config')
  const { POOL_KEYS, MIDDLEWARE_KEYS } = require('../lib/pool/options')
  const checks = [
    ...optionPaths(DEFAULTS).map((keys) => ({ type: 'ClusterizeOptions', keys, where: 'clusterize() option (lib/config.js DEFAULTS)' })),
    ...POOL_KEYS.map((key) => ({ type: 'PoolOptions', keys: [key], where: 'offload.pool() option (lib/pool/options.js POOL_KEYS)' })),
    ...MIDDLEWARE_KEYS.map((key) => ({ type: 'OffloadOptions', keys: [key], where: 'offload() option (lib/pool/options.js MIDDLEWARE_KEYS)' }))
  ]
  assert.ok(checks.length > 40, `only ${checks.length} options found`)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-option-types-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  const header = `import type { ClusterizeOptions, PoolOptions, OffloadOptions } from ${JSON.stringify(path.join(REPO, 'types', 'index.js'))}`
  const lines = [header, ...checks.map((check, i) => `export type Option${i} = ${typeAt(check.type, check.keys)}`)]
  fs.writeFileSync(path.join(dir, 'options.ts'), lines.join('\n') + '\n')
  fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { module: 'node16', moduleResolution: 'node16', target: 'es2022', strict: true, noEmit: true, skipLibCheck: true, types: ['node'], typeRoots: [path.join(REPO, 'node_modules', '@types')] },
    files: ['options.ts']
  }))
  const result = spawnSync(process.execPath, [TSC, '-p', dir, '--noEmit'], { encoding: 'utf8' })
  const output = result.stdout + result.stderr
  // options.ts(LINE,COL): error ...: line 1 is the import, line N + 2 is checks[N].
  const untyped = Array.from(output.matchAll(/options\.ts\((\d+),\d+\): error/g), (m) => checks[Number(m[1]) - 2])
  const missing = Array.from(new Set(untyped.filter(Boolean).map((c) => `${c.keys.join('.')}: ${c.where} has no type in ${c.type} (types/index.d.ts); declare it there and assert it in test/types/`)))
  assert.deepStrictEqual(missing, [], '\n' + missing.join('\n'))
  assert.strictEqual(result.status, 0, output)
})
