'use strict'

/**
 * Code that runs in each pool thread. Messages from the pool are
 * `[id, args, def?, flush?]` (see ./messages.js); replies are `[OK, result]` or `[FAILED, error]`, in the
 * order the tasks arrived (tasks run one at a time; async ones are awaited).
 */

const { parentPort, workerData } = require('node:worker_threads')
const { createRequire } = require('node:module')
const path = require('node:path')
const { pathToFileURL } = require('node:url')
const fs = require('node:fs')
const os = require('node:os')
const { TASK, RESULT, STATUS, READY } = require('./messages')
const { runWithSpanContext } = require('../telemetry')

const kTransfer = Symbol.for('clusterize.offload.transfer')
const NOT_DEFINED_RE = /^([\p{L}\p{Nl}$_][\p{L}\p{Nl}\p{Mn}\p{Mc}\p{Nd}\p{Pc}$\u200c\u200d]*) is not defined$/u

/** `require` given to inline functions, resolving from the process's cwd. */
const userRequire = createRequire(path.join(process.cwd(), '[offload-inline]'))

/** id -> { fn, source } (source only for inline functions) */
const cache = new Map()
/** Tasks that arrived while an async task was running. */
const backlog = []
let busy = false

const okMsg = [STATUS.OK, undefined]
const errMsg = [STATUS.FAILED, undefined]

function compileInline (def) {
  const expr = def.form === 1 ? `(function () { const o = ({${def.source}\n}); return o[Reflect.ownKeys(o)[0]] })()` : `(${def.source}\n)`
  const tail = `\n//# sourceURL=offload-inline-${def.hash}.js`
  let factory
  try {
    factory = new Function('require', `'use strict'; return ${expr}${tail}`) // eslint-disable-line no-new-func
  } catch {
    factory = new Function('require', `return ${expr}${tail}`) // eslint-disable-line no-new-func
  }
  return { fn: factory(userRequire), source: def.source }
}

function pickExport (mod, def) {
  let fn = mod != null ? mod[def.exportName] : undefined
  if (typeof fn !== 'function' && def.exportName === 'default' && typeof mod === 'function') fn = mod
  if (typeof fn !== 'function') throw new Error(`offload.task: ${def.path} has no exported function "${def.exportName}"`)
  return fn
}

function loadModule (def) {
  let mod
  try {
    mod = require(def.path)
  } catch (err) {
    if (err && (err.code === 'ERR_REQUIRE_ESM' || err.code === 'ERR_REQUIRE_ASYNC_MODULE')) {
      return import(pathToFileURL(def.path).href).then((ns) => {
        const fn = pickExport(ns, def)
        return { fn, source: null }
      })
    }
    throw err
  }
  return { fn: pickExport(mod, def), source: null }
}

function serializeError (err, entry) {
  if (err === null || typeof err !== 'object') {
    return { name: 'Error', message: `offloaded task threw a non-error value: ${String(err)}` }
  }
  const out = { name: err.name, message: String(err.message), stack: err.stack, code: err.code, status: err.status || err.statusCode }
  if (entry && entry.source !== null && err instanceof ReferenceError) {
    const m = NOT_DEFINED_RE.exec(err.message)
    if (m !== null && !(m[1] in globalThis) && usesIdentifier(entry.source, m[1])) out.outerVariable = m[1]
  }
  return out
}

function usesIdentifier (source, name) {
  const escaped = name.replace(/[$]/g, '\\$')
  return new RegExp(`(^|[^\\w$.])${escaped}($|[^\\w$])`).test(source)
}

function replyOk (result) {
  let list
  if (result !== null && typeof result === 'object' && result[kTransfer] === true) {
    list = result.list
    result = result.value
  }
  okMsg[RESULT.VALUE] = result
  try {
    parentPort.postMessage(okMsg, list)
  } catch (err) {
    errMsg[RESULT.VALUE] = { name: 'CloneError', message: `offload result cannot be cloned: ${err.message}; return plain data`, code: 'ERR_CLUSTERIZE_OFFLOAD_CLONE', clone: true }
    parentPort.postMessage(errMsg)
    errMsg[RESULT.VALUE] = undefined
  }
  okMsg[RESULT.VALUE] = undefined
}

function replyError (err, entry) {
  errMsg[RESULT.VALUE] = serializeError(err, entry)
  try {
    parentPort.postMessage(errMsg)
  } catch {
    errMsg[RESULT.VALUE] = { name: 'Error', message: String(err && err.message) }
    parentPort.postMessage(errMsg)
  }
  errMsg[RESULT.VALUE] = undefined
}

function settleAsync (promise, entry) {
  busy = true
  promise.then(replyOk, (err) => replyError(err, entry)).then(drainBacklog)
}

function drainBacklog () {
  busy = false
  while (!busy && backlog.length > 0) runTask(backlog.shift())
}

function isThenable (v) {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function'
}

function getEntry (msg) {
  const id = msg[TASK.ENTRY]
  let entry = cache.get(id)
  if (entry !== undefined) return entry
  const def = msg[TASK.DEF]
  if (def == null) throw new Error(`offload thread does not know task ${id}`)
  entry = def.kind === 0 ? compileInline(def) : loadModule(def)
  cache.set(id, entry)
  return entry
}

function runTask (msg) {
  if (msg[TASK.FLUSH] === true) cache.clear()
  const args = msg[TASK.ARGS]
  const trace = msg[TASK.TRACE]
  let entry
  let result
  try {
    entry = getEntry(msg)
    if (isThenable(entry)) {
      // an ES module task still loading: wait, then run
      const pending = entry
      return settleAsync(pending.then((loaded) => {
        cache.set(msg[TASK.ENTRY], loaded)
        entry = loaded
        return runWithSpanContext(trace, () => loaded.fn.apply(undefined, args))
      }), { get source () { return entry && entry.source } })
    }
    // The caller's span (a request's) is the parent of the spans the task starts.
    result = trace === undefined ? entry.fn.apply(undefined, args) : runWithSpanContext(trace, () => entry.fn.apply(undefined, args))
  } catch (err) {
    return replyError(err, entry)
  }
  if (isThenable(result)) return settleAsync(result, entry)
  replyOk(result)
}

function onMessage (msg) {
  if (busy) backlog.push(msg)
  else runTask(msg)
}

/**
 * Lower this thread's scheduling priority. On Linux a thread has its own
 * nice value, addressed by its thread id (/proc/thread-self -> <pid>/task/<tid>).
 * Elsewhere (or if the kernel refuses) threads keep the process's priority.
 */
function lowerPriority (niceness) {
  if (!niceness || process.platform !== 'linux') return
  try {
    const tid = Number(fs.readlinkSync('/proc/thread-self').split('/').pop())
    os.setPriority(tid, Math.min(19, os.getPriority(tid) + niceness))
  } catch {}
}

function start () {
  lowerPriority(workerData && workerData.niceness)
  const setup = workerData && workerData.setup
  if (!setup) return undefined
  let mod
  try {
    mod = require(setup)
  } catch (err) {
    if (!err || err.code !== 'ERR_REQUIRE_ESM') throw err
    return import(pathToFileURL(setup).href).then((ns) => (typeof ns.default === 'function' ? ns.default() : undefined))
  }
  const init = typeof mod === 'function' ? mod : mod && typeof mod.default === 'function' ? mod.default : null
  return init ? init() : undefined
}

function ready () {
  parentPort.on('message', onMessage)
  parentPort.postMessage(READY)
}

const started = start()
if (isThenable(started)) {
  started.then(ready, (err) => { setImmediate(() => { throw err }) })
} else {
  ready()
}
