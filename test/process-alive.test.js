'use strict'

// The one isAlive(): used by the CLI, the tests' cleanup and the benches.
const { test } = require('node:test')
const assert = require('node:assert')
const { spawn, execFile } = require('child_process')
const path = require('path')
const { isAlive } = require('../lib/process-alive')

test('isAlive: this process and pid 1 (EPERM counts as alive) are alive; a reaped child is not', async () => {
  assert.strictEqual(isAlive(process.pid), true)
  assert.strictEqual(isAlive(1), true)
  const child = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' })
  await new Promise((resolve) => child.once('exit', resolve))
  assert.strictEqual(isAlive(child.pid), false)
})

test('isAlive: a process another user owns (kill gives EPERM) counts as alive', async () => {
  // As root kill(1, 0) succeeds, so the check above never meets EPERM: run it
  // again as an unprivileged user (nobody), for whom pid 1 belongs to another user.
  // The child starts as this user (so it can run this Node binary and read this checkout,
  // which may live under /root) and drops to nobody once the module is loaded.
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0
  const options = {}
  const script = `const { isAlive } = require(${JSON.stringify(path.join(__dirname, '..', 'lib', 'process-alive.js'))})
    if (${asRoot}) { process.setgid(65534); process.setuid(65534) }
    let code = null
    try { process.kill(1, 0) } catch (err) { code = err.code }
    process.stdout.write(JSON.stringify({ code, alive: isAlive(1) }))`
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, ['-e', script], { ...options, timeout: 30000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${err.message}\n${stderr}`))
      resolve(JSON.parse(stdout))
    })
  })
  assert.strictEqual(out.code, 'EPERM', 'the check really met EPERM')
  assert.strictEqual(out.alive, true)
})
