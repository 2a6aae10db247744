'use strict'

/**
 * Is a process running? `kill(pid, 0)` sends nothing: it succeeds for our
 * own processes and fails with EPERM for another user's, which is running
 * too. Only ESRCH (or no such pid) means gone.
 * @param {number} pid
 * @returns {boolean}
 */
function isAlive (pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return err.code === 'EPERM'
  }
}

module.exports = { isAlive }
