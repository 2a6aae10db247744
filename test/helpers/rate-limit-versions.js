'use strict'

/**
 * The express-rate-limit majors ClusterStore supports (its Store interface,
 * v7 and v8), both installed: v8 as `express-rate-limit`, v7 under the npm
 * alias `express-rate-limit-v7`. The rate-limit tests run once per major.
 *
 * An app finds its express-rate-limit by that name, and the MemoryStore watch
 * resolves it by that name from the app's folder: `appDirFor(version)` gives
 * a folder whose `node_modules/express-rate-limit` is that major (for v7, a
 * symlink to the alias, so the app's copy and the one resolved by name are
 * one module instance, CommonJS and ESM).
 */

const fs = require('fs')
const os = require('os')
const path = require('path')

const REPO = path.join(__dirname, '..', '..')

const VERSIONS = [
  { label: 'v8', major: 8, module: 'express-rate-limit' },
  { label: 'v7', major: 7, module: 'express-rate-limit-v7' }
]

/** @returns {number} the installed major of the package behind `moduleName` */
function installedMajor (moduleName) {
  const manifest = path.join(REPO, 'node_modules', moduleName, 'package.json')
  return Number(JSON.parse(fs.readFileSync(manifest, 'utf8')).version.split('.')[0])
}

const made = []

/**
 * A folder from which `require('express-rate-limit')` loads this major.
 * @param {{ major: number, module: string }} version
 * @returns {string}
 */
function appDirFor (version) {
  if (version.module === 'express-rate-limit') return REPO
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `cz-erl-${version.label}-`))
  fs.mkdirSync(path.join(dir, 'node_modules'))
  const target = path.join(REPO, 'node_modules', version.module)
  fs.symlinkSync(target, path.join(dir, 'node_modules', 'express-rate-limit'), 'dir')
  made.push(dir)
  return dir
}

/** Remove the folders appDirFor made. */
function removeAppDirs () {
  for (const dir of made.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
}

module.exports = { VERSIONS, installedMajor, appDirFor, removeAppDirs, REPO }
