'use strict'

// Code blocks in README.md and docs/*.md marked with <!-- doc-test: ... -->
// (or 0.1's <!-- readme-test: ... -->) on the line before a ```js fence are
// real programs: `file X` must equal the file X (after its first line, which
// names it), `run prints a,b` must exit 0 printing those lines, `serve /path`
// must answer 200 there on the port given in PORT.
const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawn } = require('child_process')
const fs = require('fs')
const path = require('path')
const { request } = require('./helpers/cluster')
const { freePort } = require('./helpers/net')
const { eventuallyPasses } = require('./helpers/wait')
const { ROOT, markdownPages, runnableBlocks, strayMarkers } = require('./helpers/markdown')

// Inside the package so require('clusterize-express') resolves to this checkout.
const scratch = fs.mkdtempSync(path.join(ROOT, 'test', '.doc-test-'))
after(() => fs.rmSync(scratch, { recursive: true, force: true }))

const pages = markdownPages().filter((page) => page !== 'CHANGELOG.md')
const texts = new Map(pages.map((page) => [page, fs.readFileSync(path.join(ROOT, page), 'utf8')]))
const blocks = pages.flatMap((page) => runnableBlocks(texts.get(page)).map((block) => Object.assign({ page }, block)))

test('README and docs have runnable blocks, and every marker sits right above a ```js fence', () => {
  assert.ok(runnableBlocks(texts.get('README.md')).length >= 3, 'README.md has runnable blocks')
  assert.ok(blocks.some((block) => block.page.startsWith('docs/')), 'docs/ has runnable blocks')
  const stray = pages.filter((page) => strayMarkers(texts.get(page)) !== 0)
  assert.deepStrictEqual(stray, [], 'a marker not followed by a ```js block would be skipped silently')
})

for (const [index, block] of blocks.entries()) {
  test(`${block.page}:${block.line} (${block.kind} ${block.arg})`, async () => {
    if (block.kind === 'file') {
      const [, ...body] = block.code.split('\n')
      assert.strictEqual(body.join('\n'), fs.readFileSync(path.join(ROOT, block.arg), 'utf8'))
      return
    }
    const file = path.join(scratch, `block-${index + 1}.js`)
    fs.writeFileSync(file, block.code)
    if (block.kind === 'run') {
      const { code, stdout, stderr } = await runToExit(file)
      assert.strictEqual(code, 0, stderr)
      assert.deepStrictEqual(stdout.trim().split('\n'), block.arg.replace(/^prints /, '').split(','))
    } else if (block.kind === 'serve') {
      const port = await freePort()
      const child = spawn(process.execPath, [file], { cwd: ROOT, env: Object.assign({}, process.env, { PORT: String(port) }), stdio: 'ignore' })
      try {
        assert.strictEqual(await poll(port, block.arg), 200)
      } finally {
        await stop(child)
      }
    } else {
      assert.fail(`unknown doc-test kind ${block.kind}`)
    }
  })
}

function runToExit (file) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => { stdout += chunk })
    child.stderr.on('data', (chunk) => { stderr += chunk })
    const timer = setTimeout(() => child.kill('SIGKILL'), 20000)
    child.on('exit', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })
}

/**
 * SIGTERM, so that a clusterized example shuts its workers down itself;
 * SIGKILL if it has not exited by then (its workers then exit when their
 * IPC channel closes).
 */
function stop (child) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 15000)
    child.once('exit', () => {
      clearTimeout(timer)
      resolve()
    })
    child.kill('SIGTERM')
  })
}

/** The status of GET urlPath, retried while the program is still starting. */
function poll (port, urlPath) {
  return eventuallyPasses(async () => (await request(port, urlPath)).status, { timeoutMs: 15000 })
}
