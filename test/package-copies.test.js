'use strict'

/**
 * Optional integrations stay optional in the workers: express-rate-limit,
 * node-cron and cron are loaded (to be watched or hooked before the app) only
 * when the app declares them in its package.json, not merely because they are
 * installed. This file runs in its own process, so require.cache shows what
 * was loaded.
 */

const test = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { appDeclares } = require('../lib/package-copies')
const { watchRateLimitStores, unwatchRateLimitStores } = require('../lib/worker/rate-limit-pitfall')
const { watchCronJobs, unwatchCronJobs } = require('../lib/worker/cron-job-pitfall')
const { useCronCoordinator } = require('../lib/state/cron')

const REPO = path.join(__dirname, '..')
const made = []

function tempDir () {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-declares-'))
  made.push(dir)
  return dir
}

function writeManifest (dir, manifest) {
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(manifest))
}

/** Whether any file of the installed package `name` is in require.cache. */
function loaded (name) {
  const marker = `${path.sep}node_modules${path.sep}${name}${path.sep}`
  return Object.keys(require.cache).some((file) => file.includes(marker))
}

const silentLog = { warn () {}, info () {} }

test.after(() => {
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true })
})

test('appDeclares: listed in any dependency field of a package.json at or above the app, or no package.json at all', () => {
  const root = tempDir()
  const app = path.join(root, 'packages', 'app')
  fs.mkdirSync(app, { recursive: true })
  assert.strictEqual(appDeclares('express-rate-limit', app), true, 'no package.json anywhere above: cannot tell, so yes')

  writeManifest(app, { name: 'app', dependencies: { express: '^5.0.0' } })
  assert.strictEqual(appDeclares('express-rate-limit', app), false, 'a package.json that does not list it')

  for (const field of ['dependencies', 'devDependencies', 'optionalDependencies', 'peerDependencies']) {
    writeManifest(app, { name: 'app', [field]: { 'node-cron': '^4.0.0' } })
    assert.strictEqual(appDeclares('node-cron', app), true, field)
  }

  writeManifest(app, { name: 'app' })
  writeManifest(root, { private: true, dependencies: { cron: '^4.0.0' } })
  assert.strictEqual(appDeclares('cron', app), true, 'a workspace root above the app declares it')

  fs.writeFileSync(path.join(app, 'package.json'), '{ not json')
  assert.strictEqual(appDeclares('cron', app), true, 'an unreadable package.json is skipped')
  assert.strictEqual(appDeclares('left-pad', app), false)
})

test('installed but not declared: neither express-rate-limit, node-cron nor cron is loaded before the app', async () => {
  const app = tempDir()
  writeManifest(app, { name: 'app', dependencies: { express: '^5.0.0' } })
  // Each is resolvable from here (this repository's node_modules), so only the declaration keeps them out.
  for (const name of ['express-rate-limit', 'node-cron', 'cron']) require.resolve(name, { paths: [app, process.cwd()] })

  assert.strictEqual(await watchRateLimitStores(silentLog, 2, app), 0)
  assert.deepStrictEqual(await useCronCoordinator(app), [])
  assert.strictEqual(watchCronJobs(silentLog, 2, app), false)
  for (const name of ['express-rate-limit', 'node-cron', 'cron']) assert.strictEqual(loaded(name), false, `${name} was loaded`)
})

test('declared (this repository declares all three): they are loaded and watched', async () => {
  try {
    assert.ok(await watchRateLimitStores(silentLog, 2, REPO) >= 1)
    assert.ok((await useCronCoordinator(REPO)).length >= 1)
    assert.strictEqual(watchCronJobs(silentLog, 2, REPO), true)
    for (const name of ['express-rate-limit', 'node-cron', 'cron']) assert.strictEqual(loaded(name), true, `${name} was not loaded`)
  } finally {
    unwatchRateLimitStores()
    unwatchCronJobs()
  }
})

test('--rate-limit cluster asks for the hook by name: express-rate-limit is watched even when only a dependency uses it', async () => {
  const app = tempDir()
  writeManifest(app, { name: 'app', dependencies: { 'some-lib-that-uses-it': '^1.0.0' } })
  try {
    // Without useCluster the same folder gives 0 (the test above); with it, the copies found.
    assert.strictEqual(await watchRateLimitStores(silentLog, 2, app), 0)
    assert.ok(await watchRateLimitStores(silentLog, 2, app, { useCluster: true }) >= 1)
  } finally {
    unwatchRateLimitStores()
  }
})
