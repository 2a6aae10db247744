'use strict'

// The one isAlive(): used by the CLI, the tests' cleanup and the benches.
const { test } = require('node:test')
const assert = require('node:assert')
const { spawn } = require('child_process')
const { isAlive } = require('../lib/process-alive')

test('isAlive: this process and pid 1 (EPERM counts as alive) are alive; a reaped child is not', async () => {
  assert.strictEqual(isAlive(process.pid), true)
  assert.strictEqual(isAlive(1), true)
  const child = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' })
  await new Promise((resolve) => child.once('exit', resolve))
  assert.strictEqual(isAlive(child.pid), false)
})
