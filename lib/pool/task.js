'use strict'

/**
 * Main-thread side of tasks: turns an inline function or an
 * `offload.task(modulePath, exportName)` descriptor into an interned entry
 * `{ id, def }` (the id travels with every task, the definition only the first
 * time a given thread sees the id), and handles `transfer()` markers.
 */

const crypto = require('node:crypto')
const path = require('node:path')
const vm = require('node:vm')
const { fileURLToPath } = require('node:url')
const { InvalidTaskError, CloneError } = require('./errors')

const kTask = Symbol.for('clusterize.offload.task')
const kTransfer = Symbol.for('clusterize.offload.transfer')

/** Interned entries by key (function source, or module path + export). */
const byKey = new Map()
/** Entries by function object: the fast path for functions passed repeatedly. */
const byFn = new WeakMap()
const MAX_INTERNED = 10000
let nextId = 1

const fnToString = Function.prototype.toString
const NATIVE_RE = /\{\s*\[native code\]\s*\}\s*$/

function sha1 (text) {
  return crypto.createHash('sha1').update(text).digest('hex').slice(0, 16)
}

function intern (key, def) {
  let entry = byKey.get(key)
  if (entry !== undefined) return entry
  if (byKey.size >= MAX_INTERNED) byKey.clear() // ids keep growing, so old ids stay unambiguous
  entry = { id: nextId++, def }
  byKey.set(key, entry)
  return entry
}

function compiles (source) {
  try {
    new vm.Script(source) // eslint-disable-line no-new
    return true
  } catch {
    return false
  }
}

/**
 * Inline function -> interned entry. The source is checked once per distinct
 * source text: native and bound functions and classes get a clear error; a
 * method shorthand (`foo (a) { ... }`) is accepted by wrapping it in an object.
 * @param {Function} fn
 */
function inlineEntry (fn) {
  let entry = byFn.get(fn)
  if (entry !== undefined) return entry
  const source = fnToString.call(fn)
  entry = byKey.get(source)
  if (entry === undefined) {
    const name = fn.name ? `"${fn.name}"` : '(anonymous)'
    if (NATIVE_RE.test(source)) {
      throw new InvalidTaskError(`offload cannot run native or bound function ${name}: pass a self-contained function expression or offload.task(modulePath, exportName)`)
    }
    if (/^class\b/.test(source)) {
      throw new InvalidTaskError(`offload cannot run class ${name}: pass a function, or offload.task(modulePath, exportName)`)
    }
    let form = 0
    if (!compiles(`(${source}\n)`)) {
      if (compiles(`({${source}\n})`)) form = 1
      else throw new InvalidTaskError(`offload cannot compile function ${name} from its source (methods using super or private fields cannot be offloaded): pass a self-contained function or offload.task(modulePath, exportName)`)
    }
    entry = intern(source, { kind: 0, source, form, hash: sha1(source) })
  }
  byFn.set(fn, entry)
  return entry
}

/**
 * Resolve what `run(task)` was given into an interned entry; throws InvalidTaskError.
 * @param {unknown} task
 * @returns {{ id: number, def: object }}
 */
function resolveTask (task) {
  if (typeof task === 'function') return inlineEntry(task)
  if (task !== null && typeof task === 'object' && task[kTask] !== undefined) return task[kTask]
  throw new InvalidTaskError(`offload task must be a function or offload.task(modulePath, exportName), got ${task === null ? 'null' : typeof task}`)
}

/**
 * Describe a task that lives in a module: the thread requires (or imports) the
 * module once and caches it.
 * @param {string} modulePath absolute path or file: URL (use require.resolve)
 * @param {string} [exportName='default'] export to call; 'default' falls back to module.exports when it is a function
 * @returns {Readonly<{ modulePath: string, exportName: string }>}
 */
function moduleTask (modulePath, exportName = 'default') {
  if (modulePath instanceof URL || (typeof modulePath === 'string' && modulePath.startsWith('file:'))) modulePath = fileURLToPath(modulePath)
  if (typeof modulePath !== 'string' || !path.isAbsolute(modulePath)) {
    throw new InvalidTaskError(`offload.task: modulePath must be an absolute path or file: URL (use require.resolve('./tasks/x')), got ${typeof modulePath === 'string' ? JSON.stringify(modulePath) : typeof modulePath}`)
  }
  if (typeof exportName !== 'string' || exportName === '') {
    throw new InvalidTaskError('offload.task: exportName must be a non-empty string')
  }
  let resolved
  try {
    resolved = require.resolve(modulePath)
  } catch (err) {
    throw new InvalidTaskError(`offload.task: cannot find module ${modulePath}: ${err.message.split('\n')[0]}`)
  }
  const entry = intern(`module:${resolved}#${exportName}`, { kind: 1, path: resolved, exportName })
  const descriptor = { modulePath: resolved, exportName }
  Object.defineProperty(descriptor, kTask, { value: entry })
  return Object.freeze(descriptor)
}

/**
 * Mark a value to be transferred to the thread instead of copied (ArrayBuffer,
 * typed array or Buffer view of a non-pooled buffer, MessagePort). The sender
 * loses access to it. Module tasks may also return `transfer(result)`.
 * @template T
 * @param {T} value
 * @returns {T}
 */
function transfer (value) {
  let list
  if (value instanceof ArrayBuffer) list = [value]
  else if (ArrayBuffer.isView(value)) list = value.buffer instanceof ArrayBuffer ? [value.buffer] : []
  else if (value !== null && typeof value === 'object' && typeof value.postMessage === 'function' && typeof value.start === 'function') list = [value]
  else throw new InvalidTaskError('offload.transfer: value must be an ArrayBuffer, a typed array / Buffer view, or a MessagePort')
  return { [kTransfer]: true, value, list }
}

/**
 * Replace transfer markers in `args` (in place) by their values and return the
 * transfer list, or undefined when there is none.
 * @param {unknown[]} args
 */
function unwrapTransfers (args) {
  let list
  for (let i = 0; i < args.length; i++) {
    const a = args[i]
    if (a !== null && typeof a === 'object' && a[kTransfer] === true) {
      args[i] = a.value
      if (list === undefined) list = []
      for (const t of a.list) if (!list.includes(t)) list.push(t)
    }
  }
  return list
}

/**
 * Build the error for a postMessage that failed: find the argument that
 * cannot be cloned (slow path, only on failure).
 * @param {unknown[]} args
 * @param {Error} err
 */
function cloneError (args, err) {
  for (let i = 0; i < args.length; i++) {
    try {
      structuredClone(args[i])
    } catch (e) {
      return new CloneError(`offload argument ${i + 1} cannot be cloned: ${String(e.message).replace(/\.$/, '')}; pass plain data (objects, arrays, strings, numbers, Buffers, Maps, Sets, Dates)`, i + 1)
    }
  }
  return new CloneError(`offload arguments cannot be sent to the thread: ${err.message}`)
}

module.exports = { resolveTask, moduleTask, transfer, unwrapTransfers, cloneError, kTask, kTransfer }
