'use strict'

/**
 * A TypeScript project with exactly `typescript @types/express @types/node`
 * that installs the packed tarball compiles against our types out of the
 * box: every module our declarations import comes with the package (its
 * dependencies), under `strict` with module node16 (CommonJS and ESM files),
 * nodenext and bundler. Offline: `npm pack`, then a node_modules laid out as
 * npm would install it, from the packages already in this checkout's
 * node_modules (symlinked; `preserveSymlinks` keeps TypeScript from finding
 * anything through their real paths that the consumer would not have).
 */

const { test, before, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { runOffline: run, packTarball } = require('./helpers/pack')

const ROOT = path.join(__dirname, '..')
const INSTALLED = path.join(ROOT, 'node_modules')
/** What the consumer's package.json lists. */
const CONSUMER_DEPENDENCIES = ['typescript', '@types/express', '@types/node']

let dir = null
let project = null

/**
 * Put `name` in `modules` as npm would (a flat layout), with its dependencies;
 * a dependency its own folder nests (another version) stays nested.
 */
function install (modules, name, from) {
  const target = path.join(modules, name)
  if (!from && fs.existsSync(target)) return
  const source = from || fs.realpathSync(path.join(INSTALLED, name))
  if (!from) {
    fs.mkdirSync(path.dirname(target), { recursive: true })
    fs.symlinkSync(source, target, 'dir')
  }
  const pkg = JSON.parse(fs.readFileSync(path.join(source, 'package.json'), 'utf8'))
  const optionalPeers = pkg.peerDependenciesMeta || {}
  const wanted = Object.keys(pkg.dependencies || {})
    .concat(Object.keys(pkg.peerDependencies || {}).filter((peer) => !(optionalPeers[peer] && optionalPeers[peer].optional)))
  for (const dependency of wanted) {
    if (fs.existsSync(path.join(source, 'node_modules', dependency))) continue
    install(modules, dependency)
  }
}

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-ts-consumer-'))
  const tarball = packTarball(dir, ['--ignore-scripts']).path
  project = path.join(dir, 'consumer')
  const modules = path.join(project, 'node_modules')
  const unpacked = path.join(modules, 'clusterize-express')
  fs.mkdirSync(unpacked, { recursive: true })
  const untar = run('tar', ['-xzf', tarball, '-C', unpacked, '--strip-components=1'])
  assert.strictEqual(untar.status, 0, untar.stderr)
  for (const name of CONSUMER_DEPENDENCIES) install(modules, name)
  // The package's own dependencies, as npm installs them with it (not its devDependencies).
  install(modules, 'clusterize-express', unpacked)
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'commonjs', dependencies: Object.fromEntries(CONSUMER_DEPENDENCIES.map((name) => [name, '*'])) }))
  fs.writeFileSync(path.join(project, 'app.cts'), `import express = require('express')
import { clusterize, isPrimary, session } from 'clusterize-express'

const handle = clusterize(() => express().use(session({ secret: 'a-secret-of-at-least-32-characters!!' })), { workers: 2, defaultSessionStore: 'cluster' })
if (isPrimary(handle)) handle.reload().then((result) => console.log(result.ok))
else console.log(handle.id)
`)
  fs.writeFileSync(path.join(project, 'app.mts'), `import express from 'express'
import { clusterize, isPrimary, session } from 'clusterize-express'

const handle = clusterize(() => express().use(session({ secret: 'a-secret-of-at-least-32-characters!!' })), { workers: 2 })
if (isPrimary(handle)) await handle.shutdown()
`)
  fs.writeFileSync(path.join(project, 'app.ts'), fs.readFileSync(path.join(project, 'app.mts'), 'utf8').replace("import express from 'express'", "import express from 'express'\nexport {}"))
})

after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }) })

const SETTINGS = [
  { name: 'node16', compilerOptions: { module: 'node16', moduleResolution: 'node16' }, files: ['app.cts', 'app.mts'] },
  { name: 'nodenext', compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext' }, files: ['app.cts', 'app.mts'] },
  { name: 'bundler', compilerOptions: { module: 'esnext', moduleResolution: 'bundler', esModuleInterop: true }, files: ['app.ts'] }
]

for (const setting of SETTINGS) {
  test(`a consumer with only typescript, @types/express and @types/node compiles against the packed types (strict, ${setting.name})`, () => {
    const config = path.join(project, `tsconfig.${setting.name}.json`)
    fs.writeFileSync(config, JSON.stringify({
      compilerOptions: Object.assign({ target: 'es2022', strict: true, noEmit: true, skipLibCheck: false, preserveSymlinks: true }, setting.compilerOptions),
      files: setting.files
    }))
    const tsc = path.join(project, 'node_modules', 'typescript', 'bin', 'tsc')
    const result = run(process.execPath, [tsc, '-p', config], { cwd: project })
    assert.strictEqual(result.status, 0, result.stdout + result.stderr)
  })
}
