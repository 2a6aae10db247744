'use strict'

/**
 * The package as npm would publish it: `npm pack` ships the runtime, its
 * types and the docs' text, and nothing else (no tests, bench, examples or
 * images); every entry point is in it; README and docs links point inside
 * it or at repository-only material on purpose; and publint and
 * @arethetypeswrong/cli (run offline from node_modules) pass on the packed
 * tarball for the CommonJS and ESM entries and clusterize-express/socket.io.
 */

const { test, before, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { runOffline: run, packTarball } = require('./helpers/pack')
const { relativeLinks } = require('./helpers/markdown')

const ROOT = path.join(__dirname, '..')
const pkg = require('../package.json')
/** Folders and files that make up the runtime: everything under them ships. */
const RUNTIME = ['lib', 'middleware', 'bin', 'types']
const SHIPPED = /^(package\.json|README\.md|CHANGELOG\.md|LICENSE|socket\.io\.js|rate-limit\.js|(lib|middleware|bin|types)\/.+|docs\/[^/]+\.md)$/
/**
 * Linked from README/docs but not shipped: they stay in the repository
 * (npmjs.com resolves such links against package.json's `repository`).
 */
const REPOSITORY_ONLY = /^((examples|bench|docs\/images)(\/|$)|RELEASING\.md$)/
/**
 * The tarball as downloaded (418 KB at 0.2.0; 503 KB with the round after it: live scaling,
 * dynamic workers, the handover, the probes and slow-body bounds, and the docs for them);
 * the screenshots alone would add more than half again, and stay in the repository.
 */
const PACKED_BUDGET = 560 * 1024

let dir = null
let packed = null

function bin (name) {
  return path.join(ROOT, 'node_modules', '.bin', name)
}

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-pack-'))
  packed = packTarball(dir)
})
after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }) })

test('npm pack ships the runtime, its types and the docs text, nothing else', () => {
  const files = packed.files.map((f) => f.path)
  const dryRun = JSON.parse(run('npm', ['pack', '--dry-run', '--json']).stdout)[0].files.map((f) => f.path)
  assert.deepStrictEqual(dryRun.sort(), files.slice().sort(), 'npm pack --dry-run lists what npm pack ships')

  assert.deepStrictEqual(files.filter((file) => !SHIPPED.test(file)), [], 'only the runtime, types, README, CHANGELOG, LICENSE and docs/*.md')
  for (const file of ['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'socket.io.js', 'rate-limit.js']) assert.ok(files.includes(file), `${file} ships`)

  // Everything the repository holds under the runtime folders ships (git's list, not the disk's).
  const tracked = run('git', ['ls-files', '--', ...RUNTIME]).stdout.split('\n').filter(Boolean)
  assert.ok(tracked.length > 50, `git lists ${tracked.length} runtime files`)
  assert.deepStrictEqual(tracked.filter((file) => !files.includes(file)), [], 'every runtime file ships')
  const docs = fs.readdirSync(path.join(ROOT, 'docs')).filter((name) => name.endsWith('.md')).map((name) => 'docs/' + name)
  assert.ok(docs.length >= 1)
  assert.deepStrictEqual(docs.filter((file) => !files.includes(file)), [], 'every docs/*.md ships')

  // Every entry point, in every form a resolver may read.
  const targets = [pkg.main, pkg.types, ...Object.values(pkg.bin), ...leaves(pkg.exports), ...leaves(pkg.typesVersions)]
  const missing = targets.map((target) => path.posix.normalize(target)).filter((target) => !files.includes(target))
  assert.deepStrictEqual(missing, [], 'every entry point ships')

  assert.ok(packed.size <= PACKED_BUDGET, `the tarball is ${packed.size} bytes, over ${PACKED_BUDGET}`)
})

test('README, CHANGELOG and docs links point inside the package, or at repository-only material', () => {
  // That each link resolves at all (file and #anchor) is test/docs-links.test.js's.
  const files = new Set(packed.files.map((f) => f.path))
  const pages = ['README.md', 'CHANGELOG.md', ...Array.from(files).filter((file) => /^docs\/[^/]+\.md$/.test(file))]
  const outside = []
  let checked = 0
  for (const page of pages) {
    for (const { target, file } of relativeLinks(page, fs.readFileSync(path.join(ROOT, page), 'utf8'))) {
      if (file === '' || !fs.existsSync(path.join(ROOT, file))) continue
      checked++
      const inPackage = files.has(file) || Array.from(files).some((f) => f.startsWith(file + '/'))
      if (!inPackage && !REPOSITORY_ONLY.test(file)) outside.push(`${page}: ${target} is not in the package`)
    }
  }
  assert.ok(checked >= 5, `${checked} relative links checked`)
  assert.deepStrictEqual(outside, [])
})

test('publint passes on the packed tarball, warnings and suggestions included', () => {
  const result = run(process.execPath, [bin('publint'), 'run', '--strict', '--level', 'suggestion', packed.path])
  assert.strictEqual(result.status, 0, result.stdout + result.stderr)
  assert.match(result.stdout, /All good!/, result.stdout + result.stderr)
})

test('@arethetypeswrong/cli finds no problem for the CommonJS and ESM entries, clusterize-express/socket.io and clusterize-express/rate-limit', () => {
  const result = run(process.execPath, [bin('attw'), packed.path, '--format', 'json', '--no-definitely-typed', '--profile', 'strict'])
  const report = JSON.parse(result.stdout)
  const problems = [].concat(...Object.values(report.problems || {}), ...Object.values(report.analysis.problems || {}))
  assert.deepStrictEqual(problems, [], JSON.stringify(report.problems, null, 2).slice(0, 4000))
  assert.strictEqual(result.status, 0, result.stderr)
  const entrypoints = report.analysis.entrypoints
  for (const subpath of ['.', './socket.io', './rate-limit']) {
    assert.ok(entrypoints[subpath], `${subpath} was checked`)
    const { resolutions } = entrypoints[subpath]
    for (const kind of ['node10', 'node16-cjs', 'node16-esm', 'bundler']) {
      const resolution = resolutions[kind] && resolutions[kind].resolution
      assert.ok(resolution && resolution.isTypeScript, `${subpath} has types under ${kind}`)
    }
  }
  // import from ESM gets ESM types (the .d.mts), require() the CommonJS ones.
  assert.match(entrypoints['.'].resolutions['node16-esm'].resolution.fileName, /index\.d\.mts$/)
  assert.match(entrypoints['.'].resolutions['node16-cjs'].resolution.fileName, /index\.d\.ts$/)
})

test('the ESM entry exports at run time exactly the values its types declare', async () => {
  const esm = await import('clusterize-express')
  const declared = fs.readFileSync(path.join(ROOT, 'types/index.d.ts'), 'utf8')
  const values = [...declared.matchAll(/^export declare (?:function|const|let|class) (\w+)/gm)].map((m) => m[1])
  assert.ok(values.length > 20, `${values.length} declared values`)
  assert.deepStrictEqual(Object.keys(esm).filter((name) => name !== 'default').sort(), Array.from(new Set(values)).sort())
  assert.strictEqual(esm.default, require('clusterize-express'))
})

/** The string leaves of an exports-like object. */
function leaves (value) {
  if (typeof value === 'string') return [value]
  if (Array.isArray(value)) return value.flatMap(leaves)
  if (value && typeof value === 'object') return Object.values(value).flatMap(leaves)
  return []
}
