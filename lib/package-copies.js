'use strict'

/**
 * An optional package the app can load may be two module instances: its
 * CommonJS build and its ESM build. Features that hook such a package's
 * public API before the app loads (node-cron's default run coordinator,
 * express-rate-limit's MemoryStore) must reach both. They load a package
 * only when the app declares it (appDeclares): merely being installed is not
 * using it.
 */

const fs = require('fs')
const path = require('path')
const { pathToFileURL } = require('url')
const debug = require('debug')('clusterize:packages')

const DEPENDENCY_FIELDS = ['dependencies', 'devDependencies', 'optionalDependencies', 'peerDependencies']

/**
 * Does the app say it uses `name`? True when a package.json in `appDir` or a
 * folder above it lists `name` among its dependencies, or when there is no
 * package.json there at all (nothing to tell by). A package that is merely
 * installed (another package's dependency) is then neither loaded nor hooked.
 * @param {string} name
 * @param {string} appDir
 * @returns {boolean}
 */
function appDeclares (name, appDir) {
  let dir = path.resolve(appDir)
  let manifests = 0
  for (;;) {
    const pkg = readManifest(path.join(dir, 'package.json'))
    if (pkg !== null) {
      manifests++
      if (DEPENDENCY_FIELDS.some((field) => declaredIn(pkg[field], name))) return true
    }
    const parent = path.dirname(dir)
    if (parent === dir) break
    dir = parent
  }
  if (manifests > 0) debug('%s: not among the dependencies of the package.json files above %s: not loaded', name, appDir)
  return manifests === 0
}

function declaredIn (dependencies, name) {
  return dependencies !== null && typeof dependencies === 'object' && Object.prototype.hasOwnProperty.call(dependencies, name)
}

/** @returns {object|null} the parsed manifest, or null when there is none (or it cannot be read) */
function readManifest (file) {
  let text
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch {
    return null
  }
  try {
    const pkg = JSON.parse(text)
    return pkg !== null && typeof pkg === 'object' ? pkg : null
  } catch (err) {
    debug('%s: not JSON (%s)', file, err.message)
    return null
  }
}

/**
 * The builds of `name` the app in `appDir` can load, loaded; empty when it is
 * not installed.
 * @param {string} name package name
 * @param {string} appDir where the app resolves its packages from
 * @param {(exports: object) => unknown} identify a value the build exports that tells it
 *   is the right package (a function or class); two builds with the same value are one
 * @returns {Promise<object[]>} the module namespaces, CommonJS first
 */
async function packageCopies (name, appDir, identify) {
  let main
  try {
    main = require.resolve(name, { paths: [appDir, process.cwd()] })
  } catch {
    return []
  }
  const copies = []
  const cjs = require(main)
  const cjsMark = cjs ? identify(cjs) : undefined
  if (typeof cjsMark === 'function') copies.push(cjs)
  const esmPath = esmEntry(main, name)
  if (esmPath !== null) {
    try {
      const esm = await import(pathToFileURL(esmPath).href)
      const esmMark = esm ? identify(esm) : undefined
      if (typeof esmMark === 'function' && esmMark !== cjsMark) copies.push(esm)
    } catch (err) {
      debug('%s ESM build not loaded: %s', name, err.message)
    }
  }
  return copies
}

/** The package's ESM entry as its package.json exports it (or `module`), or null. */
function esmEntry (main, name) {
  let dir = path.dirname(main)
  for (let i = 0; i < 4; i++) {
    const manifest = path.join(dir, 'package.json')
    if (fs.existsSync(manifest)) {
      try {
        const pkg = JSON.parse(fs.readFileSync(manifest, 'utf8'))
        if (pkg.name !== name) return null
        const dot = pkg.exports && pkg.exports['.']
        const target = dot && dot.import && (typeof dot.import === 'string' ? dot.import : dot.import.default)
        const entry = target || pkg.module
        return entry ? path.join(dir, entry) : null
      } catch {
        return null
      }
    }
    dir = path.dirname(dir)
  }
  return null
}

module.exports = { packageCopies, appDeclares }
