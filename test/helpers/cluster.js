'use strict'

/**
 * Start a real cluster (a fixture script as the primary) for a test, talk
 * to it over HTTP on loopback, and always clean up: the primary and every
 * worker pid it reported are killed by PID if still alive.
 */

const { fork } = require('child_process')
const http = require('http')
const path = require('path')
const { eventually } = require('./wait')
const { isAlive } = require('../../lib/process-alive')

const started = new Set()

/**
 * @param {string} fixture path to the primary script
 * @param {{ env?: object, args?: string[], execArgv?: string[], readyTimeoutMs?: number, waitReady?: boolean, fdLimit?: number }} [options]
 *   `fdLimit`: start the primary (and so its workers) under `ulimit -n` of this many descriptors;
 *   `execArgv`: node flags for the primary
 */
function startCluster (fixture, options) {
  options = options || {}
  const forkOptions = {
    env: Object.assign({}, process.env, { PORT: '0' }, options.env),
    stdio: ['ignore', 'pipe', 'pipe', 'ipc']
  }
  if (options.execArgv) forkOptions.execArgv = options.execArgv
  if (options.fdLimit) {
    // sh sets the limit and execs node in its place: the pid and the IPC channel stay the child's.
    forkOptions.execPath = '/bin/sh'
    forkOptions.execArgv = ['-c', `ulimit -n ${Number(options.fdLimit)} && exec "$0" "$@"`, process.execPath]
  }
  const child = fork(path.resolve(fixture), options.args || [], forkOptions)
  const cluster = {
    child,
    pid: child.pid,
    port: null,
    probesPort: null,
    events: [],
    workerPids: new Set(),
    output: '',
    exit: null,
    get: (urlPath, requestOptions) => request(cluster.port, urlPath, requestOptions),
    probe: (urlPath) => request(cluster.probesPort, urlPath),
    waitFor: (predicate, timeoutMs) => waitFor(cluster, predicate, timeoutMs),
    waitEvent: (name, predicate, timeoutMs) => waitFor(cluster, () => cluster.events.find((e) => e.event === name && (!predicate || predicate(e.data))), timeoutMs),
    command: (message, replyType, timeoutMs) => command(cluster, message, replyType, timeoutMs),
    reload: (timeoutMs) => command(cluster, { type: 'cz-test:reload' }, 'cz-test:reloaded', timeoutMs).then((m) => m.result),
    stats: () => command(cluster, { type: 'cz-test:stats' }, 'cz-test:stats').then((m) => m.stats),
    /** Resolve once the workers' heartbeats report at least `n` requests in flight. */
    waitInFlight: (n) => eventually(async () => {
      const stats = await cluster.stats()
      return stats.workers.reduce((sum, w) => sum + ((w.heartbeat && w.heartbeat.inFlight) || 0), 0) >= n
    }, { timeoutMs: 20000, intervalMs: 25, what: () => `${n} requests in flight\n--- cluster output ---\n` + cluster.output }),
    /** Resolve once the primary logged a line matching `pattern`. */
    waitOutput: (pattern) => eventually(() => pattern.test(cluster.output), { timeoutMs: 20000, intervalMs: 10, what: () => `output matching ${pattern}\n--- cluster output ---\n` + cluster.output }),
    signal: (name) => { try { process.kill(child.pid, name) } catch {} },
    stop: () => stopCluster(cluster)
  }
  started.add(cluster)
  child.stdout.on('data', (chunk) => { cluster.output += chunk })
  child.stderr.on('data', (chunk) => { cluster.output += chunk })
  cluster.exit = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
  child.on('message', (message) => {
    if (message && message.type === 'cz-test:event') {
      cluster.events.push(message)
      if (message.data && message.data.pid) cluster.workerPids.add(message.data.pid)
    }
  })
  if (options.waitReady === false) return Promise.resolve(cluster)
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error('cluster not ready in time')), options.readyTimeoutMs || 30000)
    let settled = false
    function fail (err) {
      // Once ready, the primary's exit is the test's business (it may kill it on purpose).
      if (settled) return
      settled = true
      clearTimeout(timer)
      err.message += '\n--- cluster output ---\n' + cluster.output
      stopCluster(cluster).then(() => reject(err))
    }
    child.on('message', function onReady (message) {
      if (message && message.type === 'cz-test:ready') {
        if (settled) return
        settled = true
        clearTimeout(timer)
        child.removeListener('message', onReady)
        cluster.port = message.port
        cluster.probesPort = message.probesPort
        for (const worker of message.workers) cluster.workerPids.add(worker.pid)
        resolve(cluster)
      } else if (message && message.type === 'cz-test:ready-error') {
        fail(new Error('cluster failed to start: ' + message.message))
      }
    })
    cluster.exit.then(({ code, signal }) => fail(new Error(`cluster exited before ready (code ${code}, signal ${signal})`)))
  })
}

function waitFor (cluster, predicate, timeoutMs) {
  return eventually(predicate, {
    timeoutMs: timeoutMs || 20000,
    intervalMs: 25,
    what: () => 'a condition\n--- cluster output ---\n' + cluster.output
  })
}

let commandId = 0
function command (cluster, message, replyType, timeoutMs) {
  const id = ++commandId
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cluster.child.removeListener('message', onMessage)
      reject(new Error(`no ${replyType} reply in time\n--- cluster output ---\n` + cluster.output))
    }, timeoutMs || 60000)
    function onMessage (reply) {
      if (reply && reply.type === replyType && (reply.id === undefined || reply.id === id)) {
        clearTimeout(timer)
        cluster.child.removeListener('message', onMessage)
        cluster.child.removeListener('exit', onExit)
        resolve(reply)
      }
    }
    // A primary that exits will never answer: say so now, not at the timeout.
    function onExit (code, signal) {
      clearTimeout(timer)
      cluster.child.removeListener('message', onMessage)
      reject(new Error(`the primary exited (code ${code}, signal ${signal}) before its ${replyType} reply`))
    }
    if (cluster.child.exitCode !== null || cluster.child.signalCode !== null) return onExit(cluster.child.exitCode, cluster.child.signalCode)
    cluster.child.on('message', onMessage)
    cluster.child.once('exit', onExit)
    cluster.child.send(Object.assign({ id }, message))
  })
}

/**
 * SIGTERM the primary, wait for it, then SIGKILL anything still alive that
 * this test started (primary and workers, by PID).
 */
async function stopCluster (cluster) {
  if (!started.has(cluster)) return cluster.exit
  started.delete(cluster)
  if (cluster.child.exitCode === null && cluster.child.signalCode === null) {
    cluster.signal('SIGTERM')
    const timer = setTimeout(() => cluster.signal('SIGKILL'), 15000)
    await cluster.exit
    clearTimeout(timer)
  }
  for (const pid of cluster.workerPids) {
    if (isAlive(pid)) {
      try { process.kill(pid, 'SIGKILL') } catch {}
    }
  }
  return cluster.exit
}


/** Resolve true once the pid is gone (SIGKILLed children take a moment to be reaped). */
async function waitDead (pid, timeoutMs) {
  const until = Date.now() + (timeoutMs || 3000)
  while (isAlive(pid)) {
    if (Date.now() > until) return false
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return true
}

/** Stop every cluster still running (for after() hooks). */
function stopAll () {
  return Promise.all(Array.from(started).map(stopCluster))
}

/**
 * One HTTP request on a fresh connection (unless an agent is given).
 * @returns {Promise<{ status: number, headers: object, body: string, json: any }>}
 */
function request (port, urlPath, options) {
  options = options || {}
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port,
      path: urlPath,
      method: options.method || 'GET',
      headers: options.headers,
      agent: options.agent || false,
      localAddress: options.localAddress
    }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => {
        let json
        try { json = JSON.parse(body) } catch {}
        resolve({ status: res.statusCode, headers: res.headers, body, json })
      })
    })
    req.on('error', reject)
    req.setTimeout(options.timeoutMs || 15000, () => req.destroy(new Error('request timed out')))
    req.end(options.body)
  })
}

process.on('exit', () => {
  for (const cluster of started) {
    try { process.kill(cluster.child.pid, 'SIGKILL') } catch {}
    for (const pid of cluster.workerPids) { try { process.kill(pid, 'SIGKILL') } catch {} }
  }
})

module.exports = { startCluster, stopAll, request, isAlive, waitDead }
