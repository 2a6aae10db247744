#!/usr/bin/env node
'use strict'

/**
 * The test-matrix entry for the oldest versions of the socket.io peer
 * ranges in package.json: installs socket.io, engine.io, socket.io-adapter
 * and ws at the lowest version their `peerDependencies` range allows (every
 * nested copy forced to it with npm overrides; socket.io-client matches
 * socket.io) in a temporary directory, and runs the socket.io and WebSocket
 * tests against them on a copy of lib/ and test/. The newest versions are
 * what the lockfile installs, which the ordinary suite runs.
 *
 *   node test/compat/oldest-peers.js [--keep] [test files...]   (default: the realtime tests)
 *
 * --keep leaves the temporary directory (its path is printed) to debug in.
 *
 * Exits with the test run's code. Needs the registry (npm install) the
 * first time; removes its temporary directory when done.
 */

const { execFileSync, spawnSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

const root = path.join(__dirname, '..', '..')
const PEERS = ['socket.io', 'engine.io', 'socket.io-adapter', 'ws']
// Packages resolved from the old install instead of the repository's node_modules.
const FAMILY = new Set([...PEERS, 'socket.io-client', 'socket.io-parser', 'engine.io-parser', 'engine.io-client'])
const DEFAULT_TESTS = [
  'test/socketio.test.js',
  'test/socketio-drain.test.js',
  'test/socketio-plain.test.js',
  'test/socketio-binary.test.js',
  'test/socketio-recovery.test.js',
  'test/websocket.test.js'
]

/** The lowest version a `^x.y.z` (or `~`, or `>=`) range allows. */
function lowest (range) {
  const match = /^[\^~]?(?:>=)?\s*(\d+\.\d+\.\d+)$/.exec(String(range).trim())
  if (!match) throw new Error(`cannot read the lowest version of peer range ${range}`)
  return match[1]
}

function main () {
  const started = Date.now()
  const args = process.argv.slice(2)
  const keep = args[0] === '--keep'
  if (keep) args.shift()
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'))
  const versions = {}
  for (const name of PEERS) versions[name] = lowest(pkg.peerDependencies[name])
  versions['socket.io-client'] = versions['socket.io']

  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'clusterize-oldest-peers-'))
  try {
    const deps = path.join(tmp, 'deps')
    fs.mkdirSync(deps)
    fs.writeFileSync(path.join(deps, 'package.json'), JSON.stringify({
      name: 'oldest-peers', private: true, dependencies: versions, overrides: Object.fromEntries(PEERS.map((n) => [n, versions[n]]))
    }, null, 2))
    console.log('installing', Object.entries(versions).map(([n, v]) => `${n}@${v}`).join(' '))
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], { cwd: deps, stdio: 'inherit' })
    const installed = {}
    for (const name of FAMILY) {
      const file = path.join(deps, 'node_modules', name, 'package.json')
      if (fs.existsSync(file)) installed[name] = JSON.parse(fs.readFileSync(file, 'utf8')).version
    }
    console.log('installed', JSON.stringify(installed))

    // A copy of the package whose node_modules are the repository's, except the socket.io family.
    const copy = path.join(tmp, 'pkg')
    fs.mkdirSync(copy)
    for (const entry of ['package.json', 'socket.io.js', 'lib', 'test', 'middleware']) {
      if (fs.existsSync(path.join(root, entry))) fs.cpSync(path.join(root, entry), path.join(copy, entry), { recursive: true })
    }
    const modules = path.join(copy, 'node_modules')
    fs.mkdirSync(modules)
    for (const name of fs.readdirSync(path.join(root, 'node_modules'))) {
      if (name.startsWith('.') || FAMILY.has(name)) continue
      fs.symlinkSync(path.join(root, 'node_modules', name), path.join(modules, name))
    }
    for (const name of FAMILY) {
      if (installed[name]) fs.symlinkSync(path.join(deps, 'node_modules', name), path.join(modules, name))
    }

    const files = args.length > 0 ? args : DEFAULT_TESTS
    const run = spawnSync(process.execPath, ['--test', '--test-concurrency=1', '--test-timeout=120000', ...files], { cwd: copy, stdio: 'inherit' })
    console.log(`oldest peers: tests exited ${run.status}, ${((Date.now() - started) / 1000).toFixed(1)} s in all`)
    return run.status === null ? 1 : run.status
  } finally {
    if (keep) console.log('kept', tmp)
    else fs.rmSync(tmp, { recursive: true, force: true })
  }
}

process.exitCode = main()
