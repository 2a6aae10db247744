'use strict'

/**
 * After a kill -9 of the primary (no exit handler runs), the next command
 * reports the pid file stale and removes it and the dead primary's control
 * socket; whatever else sits at the socket's path is left alone.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { freePort } = require('./helpers/net')
const { eventually } = require('./helpers/wait')
const { HELLO_APP, runCli, startCli, cliScratch } = require('./helpers/cli')

const { tmp, tracked } = cliScratch('stale')

test('kill -9 of the primary: the next command removes the stale pid file and its control socket', async () => {
  const pidFile = path.join(tmp, 'killed.pid')
  const cli = await startCli([HELLO_APP, '--workers', '1', '--port', String(await freePort()), '--host', '127.0.0.1', '--pid-file', pidFile], { cwd: tmp, pidFile, tracked })
  await eventually(() => fs.existsSync(pidFile + '.sock'), { what: 'the control socket' })
  const status = await runCli(['status', '--pid-file', pidFile, '--json'], { cwd: tmp })
  for (const worker of JSON.parse(status.stdout).workers) tracked.add(worker.pid)

  cli.child.kill('SIGKILL')
  await cli.exited
  assert.ok(fs.lstatSync(pidFile + '.sock').isSocket(), 'kill -9 left the socket behind')

  const after = await runCli(['status', '--pid-file', pidFile], { cwd: tmp })
  assert.strictEqual(after.code, 1)
  assert.match(after.stderr, /stale pid file .*the file has been removed, and its control socket too/)
  assert.ok(!fs.existsSync(pidFile), 'pid file removed')
  assert.ok(!fs.existsSync(pidFile + '.sock'), 'control socket removed')
})

test('a stale pid file with a regular file at the socket path: the file is someone\'s data and stays', async () => {
  const pidFile = path.join(tmp, 'data.pid')
  const { spawnSync } = require('child_process')
  const dead = spawnSync(process.execPath, ['-e', '0'])
  fs.writeFileSync(pidFile, JSON.stringify({ pid: dead.pid, port: 1, startedAt: Date.now() }), { mode: 0o600 })
  fs.writeFileSync(pidFile + '.sock', 'not a socket')
  const result = await runCli(['status', '--pid-file', pidFile], { cwd: tmp })
  assert.strictEqual(result.code, 1)
  assert.match(result.stderr, /stale pid file .*the file has been removed\n/)
  assert.strictEqual(fs.readFileSync(pidFile + '.sock', 'utf8'), 'not a socket')
})
