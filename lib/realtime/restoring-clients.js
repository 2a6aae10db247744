'use strict'

/**
 * Which engine.io connection each restore of socket.io recovery comes on
 * (./socket-io-recovery.js puts a session back when that connection closes
 * before its socket connected).
 */

const { interceptNamespaceAdd } = require('./socketio-internals')

/**
 * The engine.io connection each restore comes on: socket.io calls the
 * adapter's restoreSession(pid, offset) from Namespace#_add(client, auth),
 * which is wrapped here to note the client by the pid in its auth. Without
 * that method (another socket.io version) nothing is noted and nothing changes.
 */
function watchRestoringClients (nsp) {
  const byPid = new Map()
  const restore = interceptNamespaceAdd(nsp, {
    before (client, auth) {
      if (auth && typeof auth.pid === 'string' && typeof auth.offset === 'string' && client && client.conn) byPid.set(auth.pid, client.conn)
    },
    after (client, auth) {
      // restoreSession() took it in add's synchronous part, or will not: never kept.
      if (auth && typeof auth.pid === 'string') byPid.delete(auth.pid)
    }
  })
  return {
    /** The connection restoring `pid`, once (restoreSession runs synchronously inside _add). */
    take (pid) {
      const conn = byPid.get(pid)
      byPid.delete(pid)
      return conn
    },
    stop () {
      restore()
      byPid.clear()
    }
  }
}

module.exports = { watchRestoringClients }
