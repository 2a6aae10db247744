'use strict'

const { test } = require('node:test')
const assert = require('node:assert')
const { spawnSync } = require('child_process')
const path = require('path')

test('types/index.d.ts compiles for ESM and CommonJS consumers, and wrong calls are rejected', () => {
  const tsc = require.resolve('typescript/bin/tsc')
  const result = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'types'), '--noEmit'], { encoding: 'utf8' })
  assert.strictEqual(result.status, 0, result.stdout + result.stderr)
})
