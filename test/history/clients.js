'use strict'

/**
 * Concurrent clients, one loop each, recording every request they make in
 * the history: invoked when sent, completed when answered (ok / fail) or
 * when it errs, times out or gets a 5xx (unknown: it may have happened).
 * Each client keeps one kept-alive connection (so it stays on a worker until
 * that connection breaks), and a seeded random number generator decides its
 * operations and pauses.
 */

const http = require('http')
const { request } = require('../helpers/cluster')
const { seededRandom } = require('./seeded-random')

const REQUEST_TIMEOUT_MS = 10000

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function keptAlive () {
  return new http.Agent({ keepAlive: true, maxSockets: 1 })
}

function cookieOf (res) {
  const cookie = (res.headers['set-cookie'] || []).find((c) => c.startsWith('connect.sid='))
  return cookie ? cookie.split(';')[0] : null
}

/**
 * Session clients: `sessions` sessions, each created by one increment, then
 * one client per session reading (GET /read) or incrementing (GET /incr) its
 * counter until stop(), on one of the session's `connections` kept-alive
 * connections, moving to another one at random (probability `switchRate`
 * per request): a browser keeps its connection, so a worker holds a read
 * lease, and its next connection may land on another worker.
 * A session's requests go one after another: express-session saves the whole
 * session last-write-wins, so two requests of one session at the same time
 * may overwrite each other by design; the concurrency is across sessions.
 */
async function sessionClients ({ cluster, history, random, sessions = 8, connections = 3, switchRate = 0.1, thinkMs = 30 }) {
  const cookies = []
  for (let s = 0; s < sessions; s++) {
    const key = `s${s}`
    const record = history.invoke({ client: `${key}-setup`, op: 'incr', key })
    const res = await request(cluster.port, '/incr', { timeoutMs: REQUEST_TIMEOUT_MS })
    if (res.status !== 200 || res.json.value !== 1) throw new Error(`creating session ${key}: HTTP ${res.status} ${res.body}`)
    history.complete(record, 'ok', res.json.value)
    cookies.push({ key, cookie: cookieOf(res) })
  }
  // Connections made now, on different workers: with the primary stopped, no new connection is accepted.
  const agentsOf = []
  for (let s = 0; s < sessions; s++) agentsOf.push(await connectionsOnWorkers(cluster, connections))
  let stopped = false
  const loops = cookies.map(({ key, cookie }, s) => (async function client () {
    const agents = agentsOf[s]
    let c = 0
    while (!stopped) {
      const op = random() < 0.6 ? 'incr' : 'read'
      if (random() < switchRate) c = Math.floor(random() * connections)
      const record = history.invoke({ client: `${key}-c${c}`, op, key })
      try {
        const res = await request(cluster.port, '/' + op, { agent: agents[c], headers: { cookie }, timeoutMs: REQUEST_TIMEOUT_MS })
        if (res.status === 200) history.complete(record, 'ok', res.json.value)
        // The session is gone: a read sees the counter of a new session, 0.
        else if (res.status === 404 && op === 'read') history.complete(record, 'ok', 0)
        else history.complete(record, 'unknown', `HTTP ${res.status}`)
      } catch (err) {
        history.complete(record, 'unknown', err.code || err.message)
        agents[c].destroy()
        agents[c] = keptAlive()
      }
      await sleep(random() * thinkMs)
    }
    for (const agent of agents) agent.destroy()
  })())
  return { stop () { stopped = true; return Promise.all(loops) } }
}

/**
 * Issue 51's reproduction, as a client: one session kept on worker A (which
 * then holds its read lease), and each time the schedule stops or blocks the
 * primary: another session's request on worker B (B's pipe now holds unread
 * data), an increment on A (answered from the lease), and 1.15 s later a read
 * of the same session on B. Every request is recorded like any other.
 */
async function leaseProbeClient ({ cluster, history }) {
  const byWorker = new Map()
  for (let i = 0; i < 40 && !(byWorker.size >= 2 && [...byWorker.values()].every((list) => list.length >= 2)); i++) {
    const agent = keptAlive()
    const res = await request(cluster.port, '/whoami', { agent, timeoutMs: REQUEST_TIMEOUT_MS })
    const list = byWorker.get(res.json.pid) || []
    byWorker.set(res.json.pid, list)
    if (list.length < 2) list.push(agent)
    else agent.destroy()
  }
  const lists = [...byWorker.values()]
  if (lists.length < 2 || lists[1].length < 2) throw new Error('the lease probe needs a connection on one worker and two on another')
  const [[a], [b, b2]] = lists
  const setup = history.invoke({ client: 'probe-setup', op: 'incr', key: 'probe' })
  const created = await request(cluster.port, '/incr', { agent: a, timeoutMs: REQUEST_TIMEOUT_MS })
  if (created.status !== 200 || created.json.value !== 1) throw new Error(`creating the probe's session: HTTP ${created.status} ${created.body}`)
  history.complete(setup, 'ok', created.json.value)
  const other = await request(cluster.port, '/incr', { agent: b2, timeoutMs: REQUEST_TIMEOUT_MS })
  const cookie = cookieOf(created)
  const otherCookie = cookieOf(other)
  async function op (agent, name, opName) {
    const record = history.invoke({ client: name, op: opName, key: 'probe' })
    try {
      const res = await request(cluster.port, '/' + opName, { agent, headers: { cookie }, timeoutMs: REQUEST_TIMEOUT_MS })
      history.complete(record, res.status === 200 ? 'ok' : 'unknown', res.status === 200 ? res.json.value : `HTTP ${res.status}`)
    } catch (err) {
      history.complete(record, 'unknown', err.code || err.message)
    }
  }
  let stopped = false
  let faultsSeen = 0
  const loop = (async function probe () {
    while (!stopped) {
      const stall = history.faults.slice(faultsSeen).find((f) => f.fault === 'stop-primary' || f.fault === 'block-primary')
      faultsSeen = history.faults.length
      if (!stall) {
        await op(a, 'probe-a', 'incr')
        await sleep(50)
        continue
      }
      await sleep(100)
      const elsewhere = request(cluster.port, '/read', { agent: b2, headers: { cookie: otherCookie }, timeoutMs: REQUEST_TIMEOUT_MS }).catch(() => null)
      await sleep(50)
      await op(a, 'probe-a', 'incr')
      await sleep(1150)
      await op(b, 'probe-b', 'read')
      await elsewhere
    }
    for (const agent of [a, b, b2]) agent.destroy()
  })()
  return { stop () { stopped = true; return loop } }
}

/** `count` kept-alive connections, spread over the workers as the primary hands them out. */
async function connectionsOnWorkers (cluster, count) {
  const agents = []
  const pids = new Set()
  for (let i = 0; i < count * 4 && agents.length < count; i++) {
    const agent = keptAlive()
    const res = await request(cluster.port, '/whoami', { agent, timeoutMs: REQUEST_TIMEOUT_MS })
    // The last connections go to workers not covered yet.
    if (agents.length < count - 1 || !pids.has(res.json.pid) || i >= count * 3) {
      agents.push(agent)
      pids.add(res.json.pid)
    } else {
      agent.destroy()
    }
  }
  return agents
}

/**
 * Rate-limit clients: GET /hit with the key `w<N>`, N the window: a new key
 * every `keyEveryMs`, on a limiter whose window outlasts the run, so that
 * each key is counted in one window. 200 admitted (ok), 429 refused (fail).
 */
async function rateLimitClients ({ cluster, history, random, clients = 4, keyEveryMs = 4000, thinkMs = 20 }) {
  const startedAt = Date.now()
  return clientLoops({ port: cluster.port, history, random, clients, thinkMs }, (c) => {
    const key = `w${Math.floor((Date.now() - startedAt) / keyEveryMs)}`
    return {
      operation: { client: `c${c}`, op: 'hit', key },
      path: '/hit',
      headers: { 'x-history-key': key },
      outcome: (res) => [res.status === 200 ? 'ok' : res.status === 429 ? 'fail' : 'unknown', res.status]
    }
  })
}

/** Bus senders: each asks a worker (its connection's) to broadcast the next `batch` numbers of its sequence. */
async function busSenders ({ cluster, history, random, clients = 2, batch = 20, thinkMs = 40 }) {
  return clientLoops({ port: cluster.port, history, random, clients, thinkMs }, (c) => ({
    operation: { client: `c${c}`, op: 'send', value: batch },
    path: `/bus-send?count=${batch}`,
    outcome: (res) => [res.status === 200 ? 'ok' : 'unknown', res.json && res.json.last]
  }))
}

/**
 * `clients` loops, each on its own kept-alive connection (a new one after an error), each
 * making the request `next(c)` describes, recording it in the history, and pausing up to
 * `thinkMs`, until stop().
 * @param {(c: number) => { operation: object, path: string, headers?: object, outcome: (res) => [string, *] }} next
 *   what client `c` does now; outcome: its result ('ok' | 'fail' | 'unknown') and value from the answer
 */
function clientLoops ({ port, history, random, clients, thinkMs }, next) {
  let stopped = false
  const loops = []
  for (let c = 0; c < clients; c++) {
    loops.push((async function client () {
      let agent = keptAlive()
      while (!stopped) {
        const { operation, path, headers, outcome } = next(c)
        const record = history.invoke(operation)
        try {
          const res = await request(port, path, { agent, headers, timeoutMs: REQUEST_TIMEOUT_MS })
          history.complete(record, ...outcome(res))
        } catch (err) {
          history.complete(record, 'unknown', err.code || err.message)
          agent.destroy()
          agent = keptAlive()
        }
        await sleep(random() * thinkMs)
      }
      agent.destroy()
    })())
  }
  return { stop () { stopped = true; return Promise.all(loops) } }
}

/**
 * socket.io clients: `receivers` sockets record every 'msg' they receive, in
 * order; one sender emits its sequence, one number after another, each
 * recorded as a 'send' (ok once acked, unknown if its socket dropped first).
 * A receiver that reconnects without its state recovered is a new receiver
 * (it may have missed anything meanwhile, by design): `r3`, then `r3.2`.
 */
async function socketIoClients ({ cluster, clusters = [cluster], history, random, receivers = 4, thinkMs = 10 }) {
  const { io } = require('socket.io-client')
  const urlOf = (host) => `http://127.0.0.1:${clusters[host % clusters.length].port}`
  const options = { transports: ['websocket'], reconnectionDelay: 100, reconnectionDelayMax: 500, timeout: 5000 }
  const sockets = []
  for (let r = 0; r < receivers; r++) {
    // With several hosts, the receivers take turns: the sender's host and the others.
    const socket = io(urlOf(r), options)
    sockets.push(socket)
    let incarnation = 0
    let name = `r${r}`
    socket.on('connect', function connected () {
      if (!socket.recovered) name = ++incarnation === 1 ? `r${r}` : `r${r}.${incarnation}`
    })
    socket.on('msg', function received ({ sender, seq }) {
      history.event({ client: name, op: 'receive', value: { sender, seq } })
    })
  }
  const sender = io(urlOf(0), options)
  sockets.push(sender)
  await Promise.all(sockets.map((socket) => socket.connected || new Promise((resolve) => socket.once('connect', resolve))))
  let stopped = false
  const loop = (async function send () {
    let seq = 0
    while (!stopped) {
      if (!sender.connected) {
        await sleep(50)
        continue
      }
      seq++
      const record = history.invoke({ client: 's0', op: 'send', value: { sender: 's0', seq } })
      try {
        await sender.timeout(REQUEST_TIMEOUT_MS).emitWithAck('send', 's0', seq)
        history.complete(record, 'ok')
      } catch (err) {
        history.complete(record, 'unknown')
      }
      await sleep(random() * thinkMs)
    }
  })()
  return {
    async stop () {
      stopped = true
      await loop
      // The last messages reach the receivers before the history is checked.
      await sleep(1000)
      for (const socket of sockets) socket.disconnect()
    }
  }
}

module.exports = { seededRandom, sessionClients, leaseProbeClient, rateLimitClients, busSenders, socketIoClients, sleep }
