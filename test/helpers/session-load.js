'use strict'

/**
 * Session traffic for the failover tests and the bench: logged-in users whose
 * every request reads and writes their session (GET /me counts visits), each
 * answer checked against what that user saw before.
 *
 * A right answer is 200 with the user's own name and a visit count above the
 * last one seen (a 503 may hide a write that did land, so "above", not "+1").
 * A 503 must carry Retry-After.
 *
 * Redis replicates asynchronously: writes a primary acknowledged but had not
 * yet sent to its replica are gone once that replica takes over, so a count
 * may go back, but never below what the replicas held when markSynced() was
 * called (after a WAIT): that is counted as `rolledBack`, not as wrong.
 * Anything else is a wrong answer: 401 (a silent new session), another user's
 * name, a count below the synced one, a 500, a reset connection.
 */

const http = require('http')
const { request } = require('./cluster')

function cookieOf (res) {
  const cookie = (res.headers['set-cookie'] || []).find((c) => c.startsWith('connect.sid='))
  return cookie ? cookie.split(';')[0] : null
}

/**
 * Log in `count` users on the cluster.
 * @returns {Promise<Array<{ name: string, cookie: string, visits: number }>>}
 */
async function logInUsers (port, count, label) {
  const users = []
  for (let i = 0; i < count; i++) {
    const name = `${label}-${i}`
    const res = await request(port, `/login?user=${name}`, { method: 'POST' })
    if (res.status !== 200) throw new Error(`login of ${name} answered ${res.status}: ${res.body}`)
    users.push({ name, cookie: cookieOf(res), visits: 0 })
  }
  return users
}

/**
 * One checked request for `user`.
 * @returns {Promise<'ok'|'unavailable'|string>} 'ok', 'unavailable' (503 with Retry-After), or what was wrong
 */
async function visit (port, user, agent) {
  let res
  try {
    res = await request(port, '/me', { headers: { cookie: user.cookie }, agent, timeoutMs: 10000 })
  } catch (err) {
    return `${user.name}: request failed: ${err.message}`
  }
  if (res.status === 503) {
    return res.headers['retry-after'] ? 'unavailable' : `${user.name}: 503 without Retry-After`
  }
  if (res.status !== 200) return `${user.name}: ${res.status} ${res.body}`
  if (res.json.user !== user.name) return `${user.name}: got the session of ${res.json.user}`
  if (res.json.visits > user.visits) {
    user.visits = res.json.visits
    return 'ok'
  }
  if (user.synced !== undefined && res.json.visits > user.synced) {
    user.visits = res.json.visits
    return 'rolledBack'
  }
  return `${user.name}: visits went from ${user.visits} to ${res.json.visits}` + (user.synced === undefined ? '' : ` (${user.synced} when the replicas were in sync)`)
}

/** The replicas hold every write so far (the caller ran WAIT): counts may not go below these. */
function markSynced (users) {
  for (const user of users) user.synced = user.visits
}

/**
 * Run checked visits round-robin over the users until stop() is called.
 * @param {number} port
 * @param {Array} users from logInUsers
 * @param {{ concurrency?: number }} [options]
 */
function runSessionLoad (port, users, { concurrency = 4 } = {}) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency })
  const tally = { ok: 0, unavailable: 0, rolledBack: 0, wrong: [], firstUnavailableAt: null, lastUnavailableAt: null }
  let stopping = false
  let next = 0
  // One user is visited by one loop at a time, so its counts stay ordered.
  const busy = new Set()
  async function loop () {
    while (!stopping) {
      let user = null
      for (let tries = 0; tries < users.length && user === null; tries++) {
        const candidate = users[next++ % users.length]
        if (!busy.has(candidate)) user = candidate
      }
      if (user === null) {
        await new Promise((resolve) => setTimeout(resolve, 5))
        continue
      }
      busy.add(user)
      const outcome = await visit(port, user, agent)
      busy.delete(user)
      if (outcome === 'ok') tally.ok++
      else if (outcome === 'rolledBack') tally.rolledBack++
      else if (outcome === 'unavailable') {
        tally.unavailable++
        tally.lastUnavailableAt = Date.now()
        if (tally.firstUnavailableAt === null) tally.firstUnavailableAt = tally.lastUnavailableAt
        await new Promise((resolve) => setTimeout(resolve, 20))
      } else tally.wrong.push(outcome)
    }
  }
  const loops = Array.from({ length: concurrency }, loop)
  return {
    tally,
    async stop () {
      stopping = true
      await Promise.all(loops)
      agent.destroy()
      return tally
    }
  }
}

/**
 * Visit every user once, in order. Resolves with the outcomes.
 * @returns {Promise<string[]>}
 */
async function visitAll (port, users) {
  const outcomes = []
  for (const user of users) outcomes.push(await visit(port, user))
  return outcomes
}

module.exports = { logInUsers, runSessionLoad, visit, visitAll, markSynced }
