'use strict'

/**
 * Stand-ins for the public values that are expensive to load (offload pulls
 * in worker_threads and the pool, session pulls in express-session and
 * connect-redis). The package root exports these stand-ins instead of
 * getters, so the CommonJS and the ESM entry export the very same values and
 * neither loads a module until the value is used: ESM binds its named
 * exports when the module is linked, which would fire a getter at once.
 */

const util = require('util')
const debug = require('debug')('clusterize:lazy')

/**
 * A function that behaves as what `load()` returns: calling it, `new` and
 * every property read, write and lookup go to the loaded value, loaded on
 * first use.
 * @param {string} name for debugging and the function's own `name`
 * @param {() => Function|object} load
 * @param {'function'|'object'} [kind='function'] what `typeof` says before loading
 * @returns {*}
 */
function lazyValue (name, load, kind) {
  let real = null
  function target () {
    if (real === null) {
      debug('loading %s', name)
      real = load()
    }
    return real
  }
  // The proxy's target only answers typeof: an arrow function has no own
  // non-configurable properties, so the proxy may report the loaded value's.
  const shell = kind === 'object' ? {} : { [name]: () => {} }[name]
  // util.inspect (console.log) shows a proxy's target without running its
  // traps: show the loaded value, or say that it is not loaded yet.
  Object.defineProperty(shell, util.inspect.custom, {
    configurable: true,
    value: function inspectLazy (depth, options, inspect) {
      return real === null ? `[${name}: loads on first use]` : (inspect || util.inspect)(real, options)
    }
  })
  const proxy = new Proxy(shell, {
    apply (_, self, args) { return Reflect.apply(target(), self, args) },
    construct (_, args, newTarget) { return Reflect.construct(target(), args, newTarget === proxy ? target() : newTarget) },
    get (_, key) { return Reflect.get(target(), key) },
    set (_, key, value) { return Reflect.set(target(), key, value) },
    has (_, key) { return Reflect.has(target(), key) },
    deleteProperty (_, key) { return Reflect.deleteProperty(target(), key) },
    defineProperty (_, key, descriptor) { return Reflect.defineProperty(target(), key, descriptor) },
    ownKeys () { return Reflect.ownKeys(target()) },
    getOwnPropertyDescriptor (_, key) {
      const descriptor = Reflect.getOwnPropertyDescriptor(target(), key)
      // A proxy may not report a property as non-configurable when its
      // shell does not have it.
      if (descriptor) descriptor.configurable = true
      return descriptor
    },
    getPrototypeOf () { return Reflect.getPrototypeOf(target()) }
  })
  return proxy
}

module.exports = { lazyValue }
