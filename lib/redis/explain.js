'use strict'

/**
 * Redis errors as an operator needs to read them: the server's own words,
 * plus what to change when the cause is on our side of the connection.
 */

const HINTS = [
  [/^WRONGPASS|invalid password|invalid username-password/i, 'the password (or ACL user) in the redis option or URL is wrong'],
  [/^NOAUTH/i, 'Redis requires a password: put it in the URL (redis://:password@host:6379) or in the `password` option'],
  // The complete list is long and per feature: name the refused command (Redis's message does) and where the list is.
  [/^NOPERM/i, 'the ACL user lacks a permission clusterize needs: the complete list of commands, keys and channels is in docs/operations.md, "Redis ACL: the complete command list"'],
  [/ECONNREFUSED/, 'nothing listens there: is Redis running, and are host and port right?'],
  [/ENOTFOUND|EAI_AGAIN/, 'the host name does not resolve'],
  // Before the "unreachable" hint: ioredis reports an unknown name inside that message.
  [/No such master|No master with name/i, 'the sentinels monitor no primary by that name: check `name` (the path of a redis+sentinel:// URL)'],
  [/All sentinels are unreachable/i, 'no sentinel answers: check the sentinels\' host:port list'],
  [/Failed to refresh slots cache|ClusterAllFailedError/i, 'no cluster node answers: check the node list, and that the nodes run with cluster-enabled yes']
]

/**
 * @param {Error|string} err
 * @returns {string} the message, with a hint when one applies
 */
function explainRedisError (err) {
  const message = (err && err.message) || String(err)
  for (const [pattern, hint] of HINTS) {
    if (pattern.test(message)) return `${message} (${hint})`
  }
  return message
}

module.exports = { explainRedisError }
