'use strict'

/**
 * The Redis ACL list in docs/operations.md is complete: a Redis ACL user
 * made from exactly the `ACL SETUSER` line of that page (its key and channel
 * patterns with this run's prefix and channel) runs every Redis feature of
 * the library: sessions (write, read, touch, all, length, destroy), the bus
 * bridge between two hosts, socket.io connection-state recovery in Redis, a
 * rate limit counted in Redis, a singleton lease and a distributed node-cron
 * task. Redis's own ACL LOG must then hold no denial for that user: it logs
 * every refused command, key and channel, including those the library or
 * ioredis only trace (ioredis's INFO ready check, a failed XTRIM).
 * Real Redis, real clusters, no mocks.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const crypto = require('crypto')
const fs = require('fs')
const os = require('os')
const path = require('path')
const Redis = require('ioredis')
const { io: connectClient } = require('socket.io-client')
const { startCluster, stopAll } = require('./helpers/cluster')
const { eventually } = require('./helpers/wait')
const { REDIS_URL, uniquePrefix, redisTestOptions, deletePrefix } = require('./helpers/redis')
const { explainRedisError } = require('../lib/redis/explain')

const ROOT = path.join(__dirname, '..')
const fixture = path.join(__dirname, 'fixtures/redis-acl-cluster.js')
const cleanups = []

after(async () => {
  await stopAll()
  for (const cleanup of cleanups.reverse()) await cleanup()
})

/**
 * The `ACL SETUSER clusterize ...` line of docs/operations.md, as the
 * arguments of ACL SETUSER for this run: the user and password made unique,
 * the default session prefix (sess:) and bus channel (clusterize:bus) in the
 * key and channel patterns replaced by this run's.
 * @returns {string[]}
 */
function documentedRules ({ user, password, sessionPrefix, channel }) {
  const text = fs.readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8')
  const lines = text.split('\n').filter((line) => /^ACL SETUSER clusterize /.test(line))
  assert.strictEqual(lines.length, 1, 'docs/operations.md has one `ACL SETUSER clusterize ...` line')
  const [, , name, ...rules] = lines[0].trim().split(/\s+/)
  assert.strictEqual(name, 'clusterize')
  assert.ok(rules.some((rule) => rule.startsWith('>')), 'the line sets a password')
  return [user, ...rules.map((rule) => rule.startsWith('>')
    ? '>' + password
    : rule.split('clusterize:bus').join(channel).split('~sess:').join('~' + sessionPrefix))]
}

/** Every entry of Redis's ACL LOG for `user` (what it refused, and why). */
async function deniedFor (admin, user) {
  const entries = await admin.call('ACL', 'LOG', '128')
  return entries.map((flat) => {
    const entry = {}
    for (let i = 0; i < flat.length; i += 2) entry[String(flat[i])] = flat[i + 1]
    return entry
  }).filter((entry) => String(entry.username) === user)
    .map((entry) => `${entry.reason} ${entry.object} (${entry.context})`)
}

function cookieOf (res) {
  const set = (res.headers['set-cookie'] || []).find((c) => c.startsWith('connect.sid='))
  assert.ok(set, 'a session cookie was set')
  return set.split(';')[0]
}

test('an ACL user with exactly the documented commands runs every Redis feature, and Redis refuses it nothing', { timeout: 180000 }, async (t) => {
  const { skip } = await redisTestOptions()
  if (skip) return t.skip(skip)

  const base = uniquePrefix('acl')
  const channel = base.slice(0, -1)
  const sessionPrefix = base + 'sess:'
  const user = 'cz-acl-' + crypto.randomBytes(6).toString('hex')
  const password = crypto.randomBytes(18).toString('hex')
  const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
  admin.on('error', () => {})
  cleanups.push(async () => {
    await admin.call('ACL', 'DELUSER', user).catch(() => {})
    await deletePrefix(base)
    await deletePrefix('{' + channel + '}')
    admin.disconnect()
  })
  await admin.call('ACL', 'SETUSER', ...documentedRules({ user, password, sessionPrefix, channel }))
  const aclUrl = new URL(REDIS_URL)
  aclUrl.username = user
  aclUrl.password = password

  // The user is really restricted, and its refusals show in the ACL LOG as this test reads it.
  const probe = new Redis(aclUrl.href, { maxRetriesPerRequest: 1 })
  probe.on('error', () => {})
  const refused = await probe.call('LASTSAVE').then(() => null, (err) => err)
  assert.match(String(refused && refused.message), /^NOPERM/)
  // What an operator reads in the 503 and the log points at this list, by the heading it has.
  const hint = /"([^"]+)"\)$/.exec(explainRedisError(refused))
  assert.ok(hint && /docs\/operations\.md/.test(explainRedisError(refused)), explainRedisError(refused))
  assert.match(fs.readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8'), new RegExp(`^#+ ${hint[1]}$`, 'm'))
  await assert.rejects(probe.get('not-' + base), /NOPERM/, 'a key outside the documented patterns is refused')
  probe.disconnect()
  const probeDenials = new Set([`command lastsave (toplevel)`, `key not-${base} (toplevel)`])
  assert.deepStrictEqual((await deniedFor(admin, user)).filter((entry) => probeDenials.has(entry)).sort(), [...probeDenials].sort(), 'the two refusals above are in the ACL LOG')

  const events = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cz-acl-')), 'events')
  fs.writeFileSync(events, '')
  cleanups.push(() => fs.rmSync(path.dirname(events), { recursive: true, force: true }))
  const env = (label) => ({ env: { CZ_ACL_URL: aclUrl.href, CZ_CHANNEL: channel, CZ_SESSION_PREFIX: sessionPrefix, CZ_EVENTS_FILE: events, CZ_LABEL: label }, readyTimeoutMs: 60000 })
  const a = await startCluster(fixture, env('a'))
  const b = await startCluster(fixture, env('b'))
  const output = () => `\n--- host a ---\n${a.output}\n--- host b ---\n${b.output}`

  // Sessions on Redis: write, read, touch + all + length, destroy.
  const first = await a.get('/write')
  assert.strictEqual(first.status, 200, first.body + output())
  const cookie = cookieOf(first)
  const again = await a.get('/write', { headers: { cookie } })
  assert.deepStrictEqual(again.json, { n: 2 }, again.body)
  assert.deepStrictEqual((await b.get('/read', { headers: { cookie } })).json, { n: 2 }, 'the other host reads the session')
  const store = await a.get('/store', { headers: { cookie } })
  assert.deepStrictEqual(store.json, { all: 1, length: 1 }, store.body)
  assert.deepStrictEqual((await a.get('/destroy', { headers: { cookie } })).json, { destroyed: true })
  assert.deepStrictEqual((await a.get('/read', { headers: { cookie } })).json, { n: null })

  // The bus bridge: a broadcast on host a reaches host b's worker.
  await eventually(async () => {
    await a.get('/bus-send?n=1')
    return (await b.get('/bus-heard')).json.some((m) => m.data.from === 'a' && m.host !== null)
  }, { what: () => 'a bus message from host a on host b' + output(), intervalMs: 200 })

  // A rate limit counted in Redis: the second hit sees the first, across hosts; reset deletes the key.
  const limit = (res) => Number(/remaining=(\d+)/.exec(res.headers.ratelimit)[1])
  const hit1 = await a.get('/limited')
  assert.strictEqual(hit1.status, 200, hit1.body + output())
  const hit2 = await b.get('/limited')
  assert.strictEqual(limit(hit2), limit(hit1) - 1, `host b counts host a's hit (${hit1.headers.ratelimit} then ${hit2.headers.ratelimit})`)
  const hits = async () => (await a.get('/limited-count')).json.hits
  assert.strictEqual(await hits(), 2)
  assert.strictEqual((await a.get('/limited-fail')).status, 400)
  // express-rate-limit takes a failed request's hit back once the response is sent.
  await eventually(async () => (await hits()) === 2, { what: () => 'the failed request\'s hit taken back' + output() })
  assert.deepStrictEqual((await a.get('/limited-reset')).json, { reset: true })
  assert.strictEqual(limit(await a.get('/limited')), 99, 'after resetKey the count starts again')

  // A singleton lease and a distributed cron fire, claimed in Redis.
  await eventually(() => /^singleton [ab] \d+$/m.test(fs.readFileSync(events, 'utf8')), { what: () => 'a singleton start' + output() })
  await eventually(() => /^cron [ab] /m.test(fs.readFileSync(events, 'utf8')), { what: () => 'a cron fire' + output() })

  // socket.io connection-state recovery in Redis: a client cut off gets what it missed.
  const url = `http://127.0.0.1:${a.port}`
  const sender = connectClient(url, { transports: ['websocket'], query: { name: 'sender' } })
  const client = connectClient(url, { transports: ['websocket'], query: { name: 'listener' }, reconnectionDelay: 100, reconnectionDelayMax: 200 })
  cleanups.push(() => { sender.disconnect(); client.disconnect() })
  const got = []
  client.on('msg', (n) => got.push(n))
  await eventually(() => sender.connected && client.connected, { what: () => 'both socket.io clients connected' + output() })
  const send = (n) => new Promise((resolve) => sender.emit('send', n, resolve))
  await send(1)
  await eventually(() => got.includes(1), { what: () => 'message 1' + output() })
  const before = await new Promise((resolve) => client.emit('whoami', resolve))
  // A client cut for good first: its session is persisted, then dropped (ZPOPMIN) for the listener's (recovery.maxSessions: 1).
  const gone = connectClient(url, { transports: ['websocket'], query: { name: 'gone' }, reconnection: false })
  cleanups.push(() => gone.disconnect())
  await eventually(() => gone.connected, { what: () => 'the third socket.io client connected' + output() })
  gone.io.engine.close()
  const index = `{${channel}}:sio:idx:/`
  await eventually(async () => (await admin.zcard(index)) === 1, { what: () => `the cut session in ${index}` + output() })
  const reconnected = new Promise((resolve) => client.once('connect', resolve))
  client.io.engine.close()
  await send(2)
  await send(3)
  await reconnected
  assert.strictEqual(client.recovered, true, 'the client was recovered' + output())
  await eventually(() => got.includes(3), { what: () => 'the missed messages' + output() })
  assert.deepStrictEqual(got, [1, 2, 3])
  const after = await new Promise((resolve) => client.emit('whoami', resolve))
  assert.deepStrictEqual({ id: after.id, data: after.data, recovered: after.recovered }, { id: before.id, data: before.data, recovered: true })

  // The primaries trim the namespace's stream every 10 s (XTRIM), then give it a TTL: wait for one.
  const streamKey = `{${channel}}:sio:log:/`
  await eventually(async () => (await admin.pttl(streamKey)) > 0, { timeoutMs: 30000, intervalMs: 250, what: () => `a trim of ${streamKey}` + output() })

  // Shut both hosts down (the leases are dropped, the streams read to the end), then read the log.
  await stopAll()
  const denied = (await deniedFor(admin, user)).filter((entry) => !probeDenials.has(entry))
  assert.deepStrictEqual(denied, [], 'Redis refused the documented user nothing' + output())
  assert.doesNotMatch(a.output + b.output, /NOPERM/)
})
