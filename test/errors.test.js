'use strict'

// The error catalogue: one base class, one code scheme, one page (docs/errors.md)
// that lists every code the library assigns.

const { test } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const root = require('..')
const { startCluster, stopAll } = require('./helpers/cluster')

const REPO = path.join(__dirname, '..')
const DOC = path.join(REPO, 'docs', 'errors.md')
const SCANNED = ['lib', 'middleware', 'bin', 'socket.io.js']
/** Codes that are not ours but that our errors carry on purpose (see docs/errors.md). */
const FOREIGN = new Set(['ABORT_ERR', 'ERR_SERVER_NOT_RUNNING'])
const SCHEME = /^ERR_CLUSTERIZE_[A-Z0-9]+_[A-Z0-9_]*[A-Z0-9]$/

function sourceFiles (entry) {
  const full = path.join(REPO, entry)
  if (fs.statSync(full).isFile()) return [full]
  return fs.readdirSync(full, { withFileTypes: true }).flatMap((dirent) => {
    const child = path.join(entry, dirent.name)
    if (dirent.isDirectory()) return sourceFiles(child)
    return /\.(c|m)?js$/.test(dirent.name) ? [path.join(REPO, child)] : []
  })
}

/**
 * Every code the library assigns: any string literal of our prefix, and any
 * literal assigned to a `code` (`code: 'X'`, `code = 'X'`, `CODE = 'X'`),
 * whatever its spelling, so that a code outside the scheme is seen too.
 * Comparisons (`err.code === 'ERR_REQUIRE_ESM'`) are not assignments.
 * @returns {Map<string, string[]>} code -> where ('lib/x.js:12')
 */
function codesInSource () {
  const found = new Map()
  const patterns = [
    /['"`](ERR_CLUSTERIZE_[A-Z0-9]+(?:_[A-Z0-9]+)*)['"`]/g,
    /\bcode\s*(?::|=(?!=))\s*['"`]([A-Za-z0-9_]+)['"`]/g,
    /\bCODE\s*=\s*['"`]([A-Za-z0-9_]+)['"`]/g
  ]
  for (const file of SCANNED.flatMap(sourceFiles)) {
    const lines = fs.readFileSync(file, 'utf8').split('\n')
    lines.forEach((line, i) => {
      for (const pattern of patterns) {
        for (const match of line.matchAll(pattern)) {
          const where = `${path.relative(REPO, file)}:${i + 1}`
          if (!found.has(match[1])) found.set(match[1], [])
          if (!found.get(match[1]).includes(where)) found.get(match[1]).push(where)
        }
      }
    })
  }
  return found
}

/** The codes docs/errors.md documents: one `### \`CODE\`` heading each. */
function codesInDoc () {
  const text = fs.readFileSync(DOC, 'utf8')
  return new Set(Array.from(text.matchAll(/^### `([A-Z0-9_]+)`\s*$/gm), (m) => m[1]))
}

test('every code the library assigns follows ERR_CLUSTERIZE_<AREA>_<WHAT> and has a section in docs/errors.md', () => {
  const source = codesInSource()
  const documented = codesInDoc()
  assert.ok(source.size >= 30, `the scan found only ${source.size} codes: is it still reading lib/?`)
  const problems = []
  for (const [code, where] of source) {
    if (FOREIGN.has(code)) continue
    if (!SCHEME.test(code)) {
      problems.push(`${where.join(', ')}: code '${code}' is outside the scheme; name it ERR_CLUSTERIZE_<AREA>_<WHAT> ` +
        '(e.g. ERR_CLUSTERIZE_BUS_TOO_LARGE), throw it as a ClusterizeError (lib/errors.js), and list it in docs/errors.md')
    } else if (!documented.has(code)) {
      problems.push(`${where.join(', ')}: code ${code} is not in docs/errors.md. Add under the section of its area:\n\n` +
        `### \`${code}\`\n\n**Class:** <the ClusterizeError subclass that carries it>.\n**Cause:** <when it is thrown>.\n**Fix:** <what the user does about it>.\n`)
    }
  }
  assert.deepStrictEqual(problems, [], '\n' + problems.join('\n'))
})

test('docs/errors.md lists no code that the library no longer assigns', () => {
  const source = codesInSource()
  const stale = Array.from(codesInDoc()).filter((code) => !source.has(code) && !FOREIGN.has(code))
  assert.deepStrictEqual(stale, [], `docs/errors.md documents ${stale.join(', ')}, which nothing in ${SCANNED.join(', ')} assigns any more: remove the section, or list the code's new name`)
})

test('the codes types/index.d.ts names are the catalogue\'s', () => {
  const documented = codesInDoc()
  const typed = new Set(Array.from(fs.readFileSync(path.join(REPO, 'types', 'index.d.ts'), 'utf8').matchAll(/'(ERR_[A-Z0-9_]+)'/g), (m) => m[1]))
  const unknown = Array.from(typed).filter((code) => !documented.has(code))
  assert.deepStrictEqual(unknown, [], `types/index.d.ts names codes docs/errors.md does not list: ${unknown.join(', ')}`)
})

test('every error class is exported by the package root and extends ClusterizeError', () => {
  const { ClusterizeError } = root
  assert.strictEqual(typeof ClusterizeError, 'function')
  const classes = Object.entries(root).filter(([, value]) => typeof value === 'function' && value.prototype instanceof Error)
  assert.ok(classes.length >= 20, classes.map(([name]) => name).join(', '))
  for (const [name, ErrorClass] of classes) {
    assert.strictEqual(ErrorClass.name, name, `root export ${name} is the class of that name`)
    assert.ok(ErrorClass === ClusterizeError || ErrorClass.prototype instanceof ClusterizeError, `${name} extends ClusterizeError`)
  }
  // The classes that areas throw are the ones the root exports, not copies.
  assert.strictEqual(root.ClusterizeBusError, require('../lib/bus/errors').ClusterizeBusError)
  assert.strictEqual(root.QueueFullError, root.offload.errors.QueueFullError)
  assert.strictEqual(root.SessionStoreUnavailableError, root.session.SessionStoreUnavailableError)
  assert.strictEqual(root.SessionTooLargeError, root.session.SessionTooLargeError)
  assert.strictEqual(root.CliUsageError, require('../lib/cli/args').CliUsageError)
  assert.strictEqual(root.CliRuntimeError, require('../lib/cli/control').CliRuntimeError)
})

/** Assert `fn` throws a ClusterizeError of the class and code given. */
function throwsOurs (fn, ErrorClass, code) {
  assert.throws(fn, (err) => {
    assert.ok(err instanceof root.ClusterizeError, `${err && err.name}: ${err && err.message} is a ClusterizeError`)
    assert.ok(err instanceof ErrorClass, `${err.name} is a ${ErrorClass.name}`)
    assert.strictEqual(err.code, code)
    return true
  })
}

test('errors thrown by every area are ClusterizeErrors with their catalogue code', async () => {
  const { resolveConfig } = require('../lib/config')
  throwsOurs(() => resolveConfig({ workers: 'many' }, {}), root.ClusterizeOptionError, 'ERR_CLUSTERIZE_CONFIG_OPTION')
  throwsOurs(() => root.clusterize(42), root.ClusterizeOptionError, 'ERR_CLUSTERIZE_CONFIG_OPTION')
  throwsOurs(() => root.session({ store: 'postgres' }), root.ClusterizeOptionError, 'ERR_CLUSTERIZE_CONFIG_OPTION')
  throwsOurs(() => root.offload.pool({ threads: 0 }), root.OffloadOptionError, 'ERR_CLUSTERIZE_OFFLOAD_OPTION')
  throwsOurs(() => root.offload.transfer('text'), root.InvalidTaskError, 'ERR_CLUSTERIZE_OFFLOAD_INVALID_TASK')
  // This test process never started clusterize(): the bus is not running here.
  throwsOurs(() => root.bus.broadcast('errors:test', 1), root.ClusterizeBusError, 'ERR_CLUSTERIZE_BUS_NOT_STARTED')
  throwsOurs(() => root.onDrain(42), root.ClusterizeError, 'ERR_CLUSTERIZE_DRAIN_HANDLER')
  throwsOurs(() => require('../lib/cli/args').parseArgs(['--workers', 'many']), root.CliUsageError, 'ERR_CLUSTERIZE_CLI_USAGE')
  throwsOurs(() => require('../lib/cli/control').findPrimary({ pidFile: path.join(os.tmpdir(), `no-such-${process.pid}.pid`) }), root.CliRuntimeError, 'ERR_CLUSTERIZE_CLI_FAILED')
  const { createAdapter } = require('../socket.io')
  throwsOurs(() => createAdapter({ coalesceWrites: 'yes' }), root.ClusterizeOptionError, 'ERR_CLUSTERIZE_CONFIG_OPTION')
  throwsOurs(() => createAdapter()(undefined), root.ClusterizeError, 'ERR_CLUSTERIZE_REALTIME_NOT_A_NAMESPACE')
  const { loadApp } = require('../lib/worker/load-app')
  await assert.rejects(loadApp(() => 42), (err) => err instanceof root.ClusterizeAppError && err.code === 'ERR_CLUSTERIZE_APP_INVALID')

  const pool = root.offload.pool({ threads: 1, maxQueue: 0 })
  try {
    const running = pool.run(() => new Promise((resolve) => setTimeout(resolve, 200)))
    await assert.rejects(pool.run(() => 1), (err) => err instanceof root.QueueFullError && err instanceof root.ClusterizeError && err.code === 'ERR_CLUSTERIZE_OFFLOAD_QUEUE_FULL' && err.status === 503)
    await running
  } finally {
    await pool.destroy()
  }
})

test('an error of ours that crosses a process keeps its class and code', () => {
  const { errorFromWire, errorToWire } = require('../lib/bus/errors')
  const { ClusterizeTimeoutError } = root
  const cases = [
    [new root.ClusterizeBusError('no handler', 'ERR_CLUSTERIZE_BUS_NO_HANDLER'), root.ClusterizeBusError],
    [new ClusterizeTimeoutError('late'), ClusterizeTimeoutError],
    [new root.ClusterizeBusError('gone', 'ERR_CLUSTERIZE_WORKER_EXIT'), root.ClusterizeBusError],
    [new root.SessionTooLargeError('big'), root.ClusterizeError]
  ]
  for (const [sent, ErrorClass] of cases) {
    const received = errorFromWire(JSON.parse(JSON.stringify(errorToWire(sent))), 'fallback')
    assert.ok(received instanceof ErrorClass, `${sent.code} comes back as a ${ErrorClass.name}`)
    assert.strictEqual(received.code, sent.code)
    assert.strictEqual(received.remote, true)
  }
  // A handler's own error stays a plain Error with its own code.
  const own = errorFromWire({ message: 'nope', code: 'E_APP' }, 'fallback')
  assert.ok(!(own instanceof root.ClusterizeError))
  assert.strictEqual(own.code, 'E_APP')
})

test('a cluster whose app exports no app: handle.ready rejects with ClusterizeAppError', async (t) => {
  t.after(stopAll)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-errors-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  const app = path.join(dir, 'empty.js')
  fs.writeFileSync(app, 'module.exports = {}\n')
  const cluster = await startCluster(path.join(__dirname, 'fixtures', 'ready-error.js'), {
    env: { CZ_TEST_APP: app },
    waitReady: false
  })
  const report = await new Promise((resolve, reject) => {
    cluster.child.on('message', (message) => { if (message && message.type === 'cz-test:ready-error-detail') resolve(message) })
    cluster.exit.then(({ code, signal }) => reject(new Error(`the primary exited (code ${code}, signal ${signal}) before reporting\n${cluster.output}`)))
  })
  assert.deepStrictEqual({ name: report.name, code: report.code, ours: report.ours, appError: report.appError },
    { name: 'ClusterizeAppError', code: 'ERR_CLUSTERIZE_APP_INVALID', ours: true, appError: true }, report.message)
  assert.match(report.message, /must export an Express app/)
  assert.deepStrictEqual(await cluster.exit, { code: 0, signal: null })
})
