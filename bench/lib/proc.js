'use strict'

/**
 * Start a server process, wait until it answers HTTP on 127.0.0.1, read its
 * memory from /proc, and stop it (and everything it forked) by PID.
 */

const { spawn } = require('child_process')
const fs = require('fs')
const http = require('http')
const net = require('net')
const path = require('path')
const readline = require('readline')
const { isAlive } = require('../../lib/process-alive')

const NODE24_BIN = '/root/.npm/_npx/387698761821791d/node_modules/node/bin/node'

/** Every process started here, so a crash of the bench still cleans up. */
const started = new Set()

/**
 * Spawn `node <args>` in its own process group (so its forks can be found
 * and reaped by the group id = its PID). Lines on stdout are emitted as 'line'.
 * @param {{ args: string[], env?: object, node?: string, name?: string }} options
 */
function startProcess (options) {
  const node = options.node || process.execPath
  const child = spawn(node, options.args, {
    cwd: path.join(__dirname, '..', '..'),
    env: Object.assign({}, process.env, options.env),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true
  })
  const proc = { name: options.name || options.args.join(' '), pid: child.pid, child, lines: [], stderr: '' }
  started.add(proc)
  readline.createInterface({ input: child.stdout }).on('line', function onLine (line) {
    proc.lines.push(line)
    child.emit('line', line)
  })
  child.stderr.on('data', function onStderr (chunk) {
    proc.stderr = (proc.stderr + chunk).slice(-4000)
  })
  proc.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  return proc
}

/** Resolve with the first stdout line matching `pattern` (RegExp). */
function waitForLine (proc, pattern, timeoutMs) {
  const found = proc.lines.find((line) => pattern.test(line))
  if (found) return Promise.resolve(found)
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.child.removeListener('line', onLine)
      reject(new Error(`${proc.name}: no line matching ${pattern} within ${timeoutMs} ms. stderr: ${proc.stderr}`))
    }, timeoutMs)
    function onLine (line) {
      if (!pattern.test(line)) return
      clearTimeout(timer)
      proc.child.removeListener('line', onLine)
      resolve(line)
    }
    proc.child.on('line', onLine)
  })
}

/** Poll GET `path` on 127.0.0.1:port until it answers 200. */
async function waitForHttp (port, timeoutMs, urlPath) {
  const deadline = Date.now() + (timeoutMs || 15000)
  while (Date.now() < deadline) {
    if (await httpOk(port, urlPath || '/')) return
    await sleep(100)
  }
  throw new Error(`nothing answered 200 on 127.0.0.1:${port} within ${timeoutMs} ms`)
}

function httpOk (port, urlPath) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: urlPath, agent: false, timeout: 1000 }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode === 200))
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(false))
  })
}

/**
 * SIGTERM the process, wait for it, then SIGKILL whatever is left of its
 * process group (its forked workers), by that group id.
 */
async function stopProcess (proc, graceMs) {
  if (!proc) return
  if (isAlive(proc.pid)) {
    try { process.kill(proc.pid, 'SIGTERM') } catch {}
    await exitedWithin(proc, graceMs || 8000)
  }
  if (groupAlive(proc.pid)) {
    try { process.kill(-proc.pid, 'SIGKILL') } catch {}
    await sleep(200)
  }
  started.delete(proc)
}

/**
 * Wait for `proc` to exit, at most `ms`. The timer is cleared on exit: a grace
 * timer left pending kept every bench alive for 8 s after its last table.
 */
function exitedWithin (proc, ms) {
  let timer
  const expired = new Promise((resolve) => { timer = setTimeout(resolve, ms) })
  return Promise.race([proc.exited, expired]).finally(() => clearTimeout(timer))
}

/** Synchronous last-resort cleanup (process 'exit' handler). */
function killAllSync () {
  for (const proc of started) {
    try { process.kill(-proc.pid, 'SIGKILL') } catch {}
  }
  started.clear()
}

function groupAlive (pgid) {
  try {
    process.kill(-pgid, 0)
    return true
  } catch {
    return false
  }
}

/** VmRSS of a process in MiB (null if it is gone). */
function rssMiB (pid) {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
    const match = /VmRSS:\s+(\d+)\s+kB/.exec(status)
    return match ? Number(match[1]) / 1024 : null
  } catch {
    return null
  }
}

/**
 * The numeric fields of /proc/<pid>/stat after "(comm) " (a name may hold
 * spaces and parentheses): field 3 (state) is index 0, ppid index 1, utime
 * and stime 11 and 12, cutime and cstime 13 and 14 (clock ticks, 100/s on
 * Linux). Throws when the process is gone or unreadable.
 * @param {number|'self'} pid
 * @returns {number[]}
 */
function statFields (pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number)
}

/** CPU time (user + system) a process has used so far, in ms. */
function cpuMs (pid) {
  try {
    const fields = statFields(pid)
    return (fields[11] + fields[12]) * 10
  } catch {
    return NaN
  }
}

/**
 * CPU time of every thread of a process so far, in ms with ns resolution
 * (the first field of /proc/<pid>/task/<tid>/schedstat, summed); NaN if it is gone.
 * Finer than cpuMs()'s 10 ms ticks, so a few seconds at a fixed rate are enough.
 */
function threadsCpuMs (pid) {
  try {
    let ns = 0
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0])
      } catch {} // a thread that ended meanwhile
    }
    return ns / 1e6
  } catch {
    return NaN
  }
}

/** PIDs whose parent is `pid`, from /proc/<pid>/stat. */
function childrenOf (pid) {
  const children = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (statFields(entry)[1] === pid) children.push(Number(entry))
    } catch {}
  }
  return children
}

/** `pid` and every process below it (children, their children, ...), `pid` first. */
function treeOf (pid) {
  const parents = new Map()
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const ppid = statFields(entry)[1]
      if (!parents.has(ppid)) parents.set(ppid, [])
      parents.get(ppid).push(Number(entry))
    } catch {}
  }
  const tree = [pid]
  for (let i = 0; i < tree.length; i++) tree.push(...(parents.get(tree[i]) || []))
  return tree
}

/**
 * Proportional set size in MiB (/proc/<pid>/smaps_rollup): shared pages
 * (node's own text, shared libraries) split between the processes mapping
 * them, so a tree's PSS sums to what it really takes, where its RSS sum
 * counts node's binary once per process. Null if unreadable.
 */
function pssMiB (pid) {
  try {
    const match = /^Pss:\s+(\d+)\s+kB/m.exec(fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))
    return match ? Number(match[1]) / 1024 : null
  } catch {
    return null
  }
}

/**
 * RSS and PSS of a whole process tree (a primary and its workers, a PM2
 * daemon and its apps, Watt's process and anything it forked), in MiB.
 * @returns {{ rss: number, pss: number, processes: number }}
 */
function treeMemory (pid) {
  let rss = 0
  let pss = 0
  let processes = 0
  for (const p of treeOf(pid)) {
    const r = rssMiB(p)
    if (r === null) continue
    rss += r
    pss += pssMiB(p) || 0
    processes++
  }
  return { rss, pss, processes }
}

/** A free TCP port on 127.0.0.1. */
function freePort () {
  return new Promise((resolve, reject) => {
    const probe = net.createServer()
    probe.once('error', reject)
    probe.listen({ port: 0, host: '127.0.0.1' }, () => {
      const { port } = probe.address()
      probe.close(() => resolve(port))
    })
  })
}

function sleep (ms) {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** The Node 24 binary, when it is installed (for reuseport). */
function node24 () {
  return fs.existsSync(NODE24_BIN) ? NODE24_BIN : null
}

function installCleanup () {
  process.once('exit', killAllSync)
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, function onSignal () {
      killAllSync()
      process.exit(130)
    })
  }
}

module.exports = {
  statFields,
  startProcess,
  waitForLine,
  waitForHttp,
  stopProcess,
  killAllSync,
  installCleanup,
  rssMiB,
  cpuMs,
  threadsCpuMs,
  childrenOf,
  treeOf,
  treeMemory,
  pssMiB,
  freePort,
  sleep,
  node24,
  isAlive
}
