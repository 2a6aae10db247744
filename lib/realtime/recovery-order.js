'use strict'

/**
 * One order of delivery in a worker for socket.io recovery: the order in
 * which the primary numbered the packets.
 *
 * The primary sends a namespace's numbered packets to every worker in order,
 * the sender's own among them (that is how the sender learns the offset its
 * doPublish() returns). A remote packet is delivered at once, in the bus
 * handler. An own packet is delivered by socket.io-adapter's
 * ClusterAdapter#broadcast once the promise doPublish() returned resolves,
 * a few microtasks later; and a restored socket joins its rooms a few
 * microtasks after restoreSession() resolves. Packets that arrive in the same
 * IPC batch right behind such a resolution would overtake it. So after a
 * resolution ("settling" task) the queue holds every later task until the
 * event loop's next turn, when all those microtasks have run.
 */

const debug = require('debug')('clusterize:socket.io')

/**
 * @returns {{ run: (task: Function, settles?: boolean) => void, close: () => void }}
 */
function createDeliveryOrder () {
  /** @type {Array<[Function, boolean]>} tasks held behind a settling one */
  const queue = []
  /** The setImmediate that ends the current settling wait, or null. */
  let settling = null

  function execute (task, settles) {
    try {
      task()
    } catch (err) {
      debug('recovery: delivery failed: %s', err.message)
    }
    if (settles) settling = setImmediate(drain)
  }

  function drain () {
    settling = null
    while (queue.length > 0 && settling === null) {
      const [task, settles] = queue.shift()
      execute(task, settles)
    }
  }

  return {
    /**
     * Run `task` now, or after the tasks held before it.
     * @param {Function} task
     * @param {boolean} [settles] it resolves a promise whose continuations must run before the next task
     */
    run (task, settles) {
      if (settling === null && queue.length === 0) execute(task, Boolean(settles))
      else queue.push([task, Boolean(settles)])
    },

    /** Drop what is held (the adapter is closing). */
    close () {
      if (settling !== null) clearImmediate(settling)
      settling = null
      queue.length = 0
    }
  }
}

module.exports = { createDeliveryOrder }
