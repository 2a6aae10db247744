'use strict'

/**
 * PM2's "run the job on instance 0 only" idiom (a NODE_APP_INSTANCE read
 * plus a timer) runs twice while a reload replaces worker 0: the app's own
 * source is read for it (lib/worker/instance-job-pitfall.js) and one warning
 * names the file and the fix, singleton(). Files on disk for the reader; a
 * real cluster started with the CLI for the warning (once, not again after a
 * reload). Every process started here is killed by PID in `after`.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { findInstanceJobs } = require('../lib/worker/instance-job-pitfall')
const { startCli, runCli, cliScratch } = require('./helpers/cli')
const { eventually } = require('./helpers/wait')

const APP = path.join(__dirname, 'fixtures', 'instance-job-app.js')
const { tmp, tracked } = cliScratch('instance-job')

test('the idiom is a read of the instance number and a timer in one of the app\'s own files', () => {
  const write = (name, source) => {
    const file = path.join(tmp, name)
    fs.mkdirSync(path.dirname(file), { recursive: true })
    fs.writeFileSync(file, source)
    return file
  }
  const files = [
    write('jobs.js', "if (process.env.NODE_APP_INSTANCE === '0') setInterval(run, 60000)\n"),
    write('cron.mjs', "import cron from 'node-cron'\nconst { NODE_APP_INSTANCE } = process.env\nif (Number(NODE_APP_INSTANCE) === 0) cron.schedule('* * * * *', run)\n"),
    write('slot.js', "if (process.env.CLUSTERIZE_WORKER_ID === '0') setTimeout(poll, 1000)\n"),
    write('read-only.js', 'module.exports = process.env.NODE_APP_INSTANCE\n'),
    write('timer-only.js', 'setInterval(run, 1000)\n'),
    write('comment.js', "// if (process.env.NODE_APP_INSTANCE === '0') ...\nsetInterval(run, 1000)\n"),
    write('node_modules/lib/index.js', "if (process.env.NODE_APP_INSTANCE === '0') setInterval(run, 1)\n"),
    write('data.json', '{ "NODE_APP_INSTANCE": "0", "setInterval(": 1 }\n')
  ]
  assert.deepStrictEqual(findInstanceJobs(files).map((file) => path.basename(file)), ['jobs.js', 'cron.mjs', 'slot.js'])
})

test('an app with the idiom gets one warning with the fix, from worker 0, and no second one after a reload', async () => {
  const pidFile = path.join(tmp, 'run', 'jobs.pid')
  const cli = await startCli([APP, '--workers', '2', '--port', '0', '--host', '127.0.0.1', '--bake-ms', '0', '--pid-file', pidFile], { cwd: tmp, pidFile, tracked, env: { NODE_APP_INSTANCE: '' } })
  try {
    const status = JSON.parse((await runCli(['status', '--pid-file', pidFile, '--json'], { cwd: tmp })).stdout)
    for (const worker of status.workers) tracked.add(worker.pid)
    const warning = /instance-job-app\.js reads the instance number and starts a timer: the PM2 idiom .* runs it twice while a reload replaces worker 0/g
    await eventually(() => warning.test(cli.output), { what: () => 'the warning:\n' + cli.output })
    assert.match(cli.output, /\[clusterize worker 0\] .*instance-job-app\.js reads the instance number/)
    assert.match(cli.output, /NODE_APP_INSTANCE is not set .* so it may never run/)
    assert.match(cli.output, /singleton\('job', \(signal\) =>/)
    const reload = await runCli(['reload', '--pid-file', pidFile], { cwd: tmp })
    assert.strictEqual(reload.code, 0, reload.stdout + reload.stderr)
    assert.strictEqual(cli.output.match(warning).length, 1, cli.output)
    const stop = await runCli(['stop', '--pid-file', pidFile], { cwd: tmp })
    assert.strictEqual(stop.code, 0, stop.stderr)
    assert.deepStrictEqual(await cli.exited, { code: 0, signal: null })
  } finally {
    if (cli.child.exitCode === null && cli.child.signalCode === null) cli.child.kill('SIGKILL')
  }
})
