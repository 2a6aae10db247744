'use strict'

// README code blocks marked with <!-- readme-test: ... --> are real programs:
// `file X` must equal the file X (after its first line, which names it),
// `run prints a,b` must exit 0 printing those lines, `serve /path` must answer 200 there.
const { test, after } = require('node:test')
const assert = require('node:assert')
const { spawn } = require('child_process')
const fs = require('fs')
const path = require('path')
const { request } = require('./helpers/cluster')
const { freePort } = require('./helpers/net')
const { eventuallyPasses } = require('./helpers/wait')

const root = path.join(__dirname, '..')
const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8')
// Inside the package so require('clusterize-express') resolves to this checkout.
const scratch = fs.mkdtempSync(path.join(root, 'test', '.readme-'))
after(() => fs.rmSync(scratch, { recursive: true, force: true }))

const marked = [...readme.matchAll(/<!-- readme-test: (\w+) ?(.*?) -->\n```js\n([\s\S]*?)```/g)]
  .map(([, kind, arg, code]) => ({ kind, arg, code }))

test('the README has runnable blocks', () => {
  assert.ok(marked.length >= 3, `found ${marked.length}`)
})

for (const [index, block] of marked.entries()) {
  test(`README block ${index + 1} (${block.kind} ${block.arg})`, async () => {
    if (block.kind === 'file') {
      const [, ...body] = block.code.split('\n')
      assert.strictEqual(body.join('\n'), fs.readFileSync(path.join(root, block.arg), 'utf8'))
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
      const child = spawn(process.execPath, [file], { cwd: root, env: Object.assign({}, process.env, { PORT: String(port) }), stdio: 'ignore' })
      try {
        assert.strictEqual(await poll(port, block.arg), 200)
      } finally {
        child.kill('SIGKILL')
      }
    } else {
      assert.fail(`unknown readme-test kind ${block.kind}`)
    }
  })
}

function runToExit (file) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
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

/** The status of GET urlPath, retried while the program is still starting. */
function poll (port, urlPath) {
  return eventuallyPasses(async () => (await request(port, urlPath)).status, { timeoutMs: 15000 })
}
