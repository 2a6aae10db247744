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
 * How long a settling task holds the ones behind it. 'own': an own
 * broadcast's offset. Own settles that follow one another run together: the
 * continuations of the promises they resolve run in resolution order, each
 * the same few microtasks deep, so they cannot overtake each other, and a
 * burst of emits is delivered to this worker's clients in one turn (one TCP
 * write per client with coalesceWrites) instead of one turn per emit.
 * 'strict' (a restore, or `true`): everything behind it waits for the next
 * turn, since socket.io joins the restored socket to its rooms an unknown
 * number of microtasks later.
 */
const HOLD = Object.freeze({ OWN: 'own', STRICT: 'strict' })

/**
 * @returns {{ run: (task: Function, settles?: boolean|'own'|'strict') => void, close: () => void }}
 */
function createDeliveryOrder () {
  /** @type {Array<[Function, string|null]>} tasks held behind a settling one */
  const queue = []
  /** The setImmediate that ends the current hold, or null. */
  let settling = null
  /** What holds the queue until then: HOLD.OWN, HOLD.STRICT or null. */
  let hold = null

  function kindOf (settles) {
    if (settles === HOLD.OWN) return HOLD.OWN
    return settles ? HOLD.STRICT : null
  }

  /** May a task of `kind` run now, with nothing queued before it? */
  function mayRun (kind) {
    return hold === null || (hold === HOLD.OWN && kind === HOLD.OWN)
  }

  function execute (task, kind) {
    try {
      task()
    } catch (err) {
      debug('recovery: delivery failed: %s', err.message)
    }
    if (kind === null) return
    hold = hold === HOLD.STRICT || kind === HOLD.STRICT ? HOLD.STRICT : HOLD.OWN
    if (settling === null) settling = setImmediate(drain)
  }

  function drain () {
    settling = null
    hold = null
    while (queue.length > 0 && mayRun(queue[0][1])) {
      const [task, kind] = queue.shift()
      execute(task, kind)
    }
  }

  return {
    /**
     * Run `task` now, or after the tasks held before it.
     * @param {Function} task
     * @param {boolean|'own'|'strict'} [settles] it resolves a promise whose continuations must run
     *   before the next task: 'own' for an own broadcast's offset, true or 'strict' otherwise
     */
    run (task, settles) {
      const kind = kindOf(settles)
      if (queue.length === 0 && mayRun(kind)) execute(task, kind)
      else queue.push([task, kind])
    },

    /** Drop what is held (the adapter is closing). */
    close () {
      if (settling !== null) clearImmediate(settling)
      settling = null
      hold = null
      queue.length = 0
    }
  }
}

module.exports = { createDeliveryOrder, HOLD }
