'use strict'

/**
 * The Redis session store: connect-redis 8 (the last major that supports
 * ioredis) over an ioredis client, plus availability tracking so the session
 * middleware answers 503 at once while Redis is unreachable, and recovers by
 * itself when it returns.
 *
 * The client we build fails fast while disconnected (no offline queue, one
 * retry per command, a command timeout) and keeps reconnecting forever with
 * a short capped backoff. A client the user passes in is used as is.
 */

const { RedisStore } = require('connect-redis')
const debug = require('debug')('clusterize:session')
const { toUnavailable, SessionStoreUnavailableError } = require('./unavailable')
const { callOnce } = require('./callback')
const { inflatableOrNull, whyNotInflatable, Unreadable } = require('./inflatable')
const { spreadOverSlots } = require('./redis-cluster-keys')
const { parseRedisTarget, isClusterTarget, topologyOf } = require('../redis/target')
const { connectRedis } = require('../redis/connect')
const { explainRedisError } = require('../redis/explain')

const DEFAULT_PREFIX = 'sess:'

/**
 * touch: replace the stored record only if it is still the one we read (a
 * concurrent save wins, a deleted or expired session stays gone).
 */
const TOUCH_SCRIPT = "if redis.call('GET', KEYS[1]) == ARGV[1] then " +
  "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0"

/**
 * touch in one round trip. ARGV: the new cookie's JSON, PX, the client's now
 * (ms). Returns 0 (gone or expired: left as is), 1 (cookie replaced, the rest
 * of the record byte for byte), or the stored record when the script cannot
 * decide (not JSON.stringify's shape, a cookie field other than expires and
 * originalMaxAge differs, an expires it cannot parse): refresh() then
 * decides in JavaScript, with the record in hand.
 */
const FAST_TOUCH_SCRIPT = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
if string.sub(raw, 1, 11) ~= '{"cookie":{' then return raw end
local ok, doc = pcall(cjson.decode, raw)
if not ok or type(doc) ~= 'table' or type(doc.cookie) ~= 'table' then return raw end
local stored, new = doc.cookie, cjson.decode(ARGV[1])
for k, v in pairs(stored) do if k ~= 'expires' and k ~= 'originalMaxAge' and new[k] ~= v then return raw end end
for k, v in pairs(new) do if k ~= 'expires' and k ~= 'originalMaxAge' and stored[k] ~= v then return raw end end
local x = stored.expires
if x ~= nil and x ~= cjson.null then
  if type(x) ~= 'string' then return raw end
  local y, mo, d, h, mi, s, ms = string.match(x, '^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)%.(%d%d%d)Z$')
  if not y then return raw end
  y, mo, d, h, mi, s = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
  if mo < 1 or mo > 12 or d < 1 or d > 31 or h > 23 or mi > 59 or s > 59 then return raw end
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * (mo > 2 and mo - 3 or mo + 9) + 2) / 5) + d - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  if ((days * 24 + h) * 60 + mi) * 60000 + s * 1000 + tonumber(ms) <= tonumber(ARGV[3]) then return 0 end
end
local i = 12
while true do
  local j = string.find(raw, '[{}%[%]"]', i)
  if not j then return raw end
  local c = string.sub(raw, j, j)
  if c == '}' then i = j break end
  if c ~= '"' then return raw end
  i = j + 1
  while true do
    local q = string.find(raw, '["\\\\]', i)
    if not q then return raw end
    if string.sub(raw, q, q) == '"' then i = q + 1 break end
    i = q + 2
  end
end
redis.call('SET', KEYS[1], '{"cookie":' .. ARGV[1] .. string.sub(raw, i + 1), 'PX', ARGV[2])
return 1`
const FAST_TOUCH_SHA = require('crypto').createHash('sha1').update(FAST_TOUCH_SCRIPT).digest('hex')

/** A touch this soon after this store saved the same session object, moving its expiry less than this, is skipped. */
const TOUCH_AFTER_SET_MS = 1000

/** JSON, except that an unreadable stored session reads as "no session" (see inflatable.js). */
const serializer = {
  stringify: JSON.stringify,
  parse: function parseSession (text) {
    try {
      return JSON.parse(text)
    } catch (err) {
      return new Unreadable(err.message)
    }
  }
}

class ClusterizeRedisStore extends RedisStore {
  /**
   * @param {object} options
   * @param {*} options.redis a Redis target: URL (redis://, redis+sentinel://, redis+cluster://), ioredis
   *   options, a list of cluster nodes, or an ioredis Redis or Cluster client (see lib/redis/target.js)
   * @param {string} [options.option='redis'] where `redis` came from, named in a startup error ('REDIS_URL')
   * @param {string} [options.prefix='sess:']
   * @param {number} [options.ttl=86400] seconds, when the cookie has no expiry
   * @param {number} [options.timeoutMs=2000] command timeout for a client we build
   */
  constructor (options) {
    const timeoutMs = options.timeoutMs || 2000
    const target = parseRedisTarget(options.redis, options.option || 'redis', 'session')
    const ownsClient = target.client === undefined
    const client = ownsClient ? connectRedis(target, { timeoutMs, autoPipelining: true }) : target.client
    super({ client, prefix: options.prefix === undefined ? DEFAULT_PREFIX : options.prefix, ttl: options.ttl, serializer })
    this.redis = client
    this.topology = topologyOf(target)
    if (isClusterTarget(target)) spreadOverSlots(this.client, client)
    // Millisecond expiry: connect-redis computes whole seconds (rounded up) and
    // sends EX; _getTTL below gives it milliseconds and we send PX instead.
    this.client.set = function setPx (key, val, ms) {
      return ms ? client.set(key, val, 'PX', ms) : client.set(key, val)
    }
    this.ownsClient = ownsClient
    // session object -> { sid, deadline } of this store's last save of it (see refresh).
    this.justSet = new WeakMap()
    this.timeoutMs = timeoutMs
    this.lastError = null
    this.everReady = client.status === 'ready'
    this.waiters = []
    this.onReady = () => {
      if (!this.everReady) debug('redis session store connected')
      else debug('redis session store reconnected')
      this.everReady = true
      this.lastError = null
      this.flushWaiters(null)
    }
    this.onError = (err) => {
      this.lastError = explainRedisError(err)
      debug('redis session store error: %s', this.lastError)
      // Retrying will not fix a refused password: answer the waiting requests now.
      if (!this.everReady && /^(WRONGPASS|NOAUTH|NOPERM)/.test(err && err.message)) this.flushWaiters(err)
    }
    this.onEnd = () => {
      this.flushWaiters(new Error(this.lastError || 'connection closed'))
    }
    client.on('ready', this.onReady)
    client.on('error', this.onError)
    client.on('end', this.onEnd)
  }

  /** @returns {{ available: boolean, lastError: string|null }} */
  availability () {
    const status = this.redis.status
    // Still making its first connection, with no error yet: not an outage (the
    // gate waits for it), so no "unavailable" alarm at every start.
    const firstConnect = !this.everReady && this.lastError === null && (status === 'wait' || status === 'connecting' || status === 'connect')
    const available = status === 'ready' || firstConnect
    return { available, lastError: available ? null : (this.lastError || `connection ${status}`) }
  }

  /**
   * Call back with null when Redis can take commands, or with a
   * SessionStoreUnavailableError. Before the first connection it waits up to
   * timeoutMs; after that a disconnected Redis fails at once.
   * @param {(err: Error|null) => void} cb
   */
  checkAvailable (cb) {
    const status = this.redis.status
    if (status === 'ready') return cb(null)
    if (!this.everReady && (status === 'wait' || status === 'connecting' || status === 'connect')) {
      if (status === 'wait') this.redis.connect().catch(() => {})
      const waiter = { cb, timer: null }
      waiter.timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1)
        cb(this.unavailableError())
      }, this.timeoutMs)
      this.waiters.push(waiter)
      return
    }
    cb(this.unavailableError())
  }

  unavailableError () {
    const reason = this.lastError || `connection ${this.redis.status}`
    return new SessionStoreUnavailableError(`session store unavailable: redis: ${reason}`, { store: 'redis' })
  }

  flushWaiters (err) {
    const waiters = this.waiters
    this.waiters = []
    for (const waiter of waiters) {
      clearTimeout(waiter.timer)
      waiter.cb(err ? this.unavailableError() : null)
    }
  }

  /**
   * Run `run` once Redis has connected for the first time: a store used
   * directly (plain express-session, or a call right after creation) waits
   * up to timeoutMs for that, as our middleware's gate does, instead of
   * failing at once on the offline queue. After the first connection it runs
   * at once, and a disconnected Redis fails fast.
   * @param {(err: Error) => void} answer the tagged callback
   * @param {() => *} run
   */
  afterFirstConnection (answer, run) {
    if (this.everReady || this.redis.status === 'ready') return run()
    this.checkAvailable(function firstConnection (err) {
      if (err) return answer(err)
      run()
    })
  }

  get (sid, cb) {
    if (typeof cb !== 'function') return asPromise(this, 'get', [sid])
    const answer = tagErrors(cb, 'get')
    const remove = (removed) => this.destroy(sid, removed)
    this.afterFirstConnection(answer, () => super.get(sid, function gotSession (err, sess) {
      if (err) return answer(err)
      const readable = inflatableOrNull(sess, 'redis', remove)
      answer(null, readable !== null && cookieExpired(readable) ? null : readable)
    }))
  }

  set (sid, sess, cb) {
    if (typeof cb !== 'function') return asPromise(this, 'set', [sid, sess])
    const answer = tagErrors(cb, 'set')
    const deadline = Date.now() + this._getTTL(sess)
    this.afterFirstConnection(answer, () => super.set(sid, sess, (err) => {
      if (!err && sess !== null && typeof sess === 'object') this.justSet.set(sess, { sid, deadline })
      answer(err)
    }))
  }

  /**
   * Milliseconds the session has left (connect-redis calls this its TTL).
   * @param {object} sess
   * @returns {number}
   */
  _getTTL (sess) {
    if (typeof this.ttl === 'function') return Math.ceil(this.ttl(sess) * 1000)
    const expires = sess && sess.cookie && sess.cookie.expires
    if (expires) return Number(new Date(expires)) - Date.now()
    return this.ttl * 1000
  }

  /**
   * Extend the session's expiry and refresh its stored cookie (as MemoryStore
   * does), leaving its data as stored. A session that is gone stays gone.
   */
  touch (sid, sess, cb) {
    if (typeof cb !== 'function') return asPromise(this, 'touch', [sid, sess])
    const answer = tagErrors(cb, 'touch')
    this.afterFirstConnection(answer, () => {
      this.refresh(sid, sess).then(() => answer(null), answer)
    })
  }

  async refresh (sid, sess) {
    const key = this.prefix + sid
    const ms = this._getTTL(sess)
    if (!(ms > 0)) return this.redis.del(key)
    if (!sess || !sess.cookie) return this.redis.pexpire(key, ms)
    // A save of this same session object just stored it with (almost) this expiry.
    const set = this.justSet.get(sess)
    const moved = set === undefined ? -1 : Date.now() + ms - set.deadline
    if (set !== undefined && set.sid === sid && moved >= 0 && moved < TOUCH_AFTER_SET_MS) {
      debug('touch %s: saved just before, skipped', sid)
      return
    }
    const args = [1, key, this.serializer.stringify(sess.cookie), Math.ceil(ms), Date.now()]
    const fast = await this.redis.evalsha(FAST_TOUCH_SHA, ...args).catch((err) => {
      if (!/NOSCRIPT/.test(err.message)) throw err
      return this.redis.eval(FAST_TOUCH_SCRIPT, ...args)
    })
    if (fast === 0 || fast === 1) return
    // The script could not decide: the careful path, with the record it returned.
    const stored = fast
    const current = this.serializer.parse(stored)
    if (whyNotInflatable(current) !== null) {
      await this.redis.pexpire(key, ms)
      return
    }
    if (cookieExpired(current)) return
    current.cookie = sess.cookie
    // Measured again after the read, so the round trip does not lengthen the session.
    const left = this._getTTL(sess)
    if (!(left > 0)) return this.redis.del(key)
    const replaced = await this.redis.eval(TOUCH_SCRIPT, 1, key, stored, this.serializer.stringify(current), Math.ceil(left))
    if (replaced === 0) debug('touch %s: session saved or removed meanwhile, left as is', sid)
  }

  destroy (sid, cb) {
    if (typeof cb !== 'function') return asPromise(this, 'destroy', [sid])
    const answer = tagErrors(cb, 'destroy')
    this.afterFirstConnection(answer, () => super.destroy(sid, answer))
  }

  clear (cb) {
    if (typeof cb !== 'function') return asPromise(this, 'clear', [])
    const answer = tagErrors(cb, 'clear')
    this.afterFirstConnection(answer, () => super.clear(answer))
  }

  length (cb) {
    if (typeof cb !== 'function') return asPromise(this, 'length', [])
    const answer = tagErrors(cb, 'length')
    this.afterFirstConnection(answer, () => super.length(answer))
  }

  /** Every session express-session can read, with its `id` (an unreadable record is skipped, not an error). */
  all (cb) {
    if (typeof cb !== 'function') return asPromise(this, 'all', [])
    const answer = tagErrors(cb, 'all')
    this.afterFirstConnection(answer, () => {
      this.readAll().then((all) => answer(null, all), answer)
    })
  }

  async readAll () {
    const keys = await this._getAllKeys()
    if (keys.length === 0) return []
    const values = await this.client.mget(keys)
    const out = []
    values.forEach((raw, i) => {
      const sess = raw === null ? null : this.serializer.parse(raw)
      if (whyNotInflatable(sess) !== null || cookieExpired(sess)) return
      sess.id = keys[i].slice(this.prefix.length)
      out.push(sess)
    })
    return out
  }

  /**
   * Stop using the client: quit it if we built it, else just stop listening.
   * @returns {Promise<void>}
   */
  async close () {
    this.redis.off('ready', this.onReady)
    this.redis.off('error', this.onError)
    this.redis.off('end', this.onEnd)
    this.flushWaiters(new Error('store closed'))
    if (!this.ownsClient) return
    // Errors while our own client shuts down are expected: without a listener
    // ioredis would print them to the console.
    this.redis.on('error', function closingError (err) { debug('while closing: %s', err.message) })
    if (this.redis.status === 'ready') {
      await this.redis.quit().catch(() => this.redis.disconnect())
    } else {
      this.redis.disconnect()
    }
  }
}

/**
 * Has the session's cookie expired? Redis drops the key a command's transit
 * after that (PX is relative); the cookie decides to the millisecond, as in
 * MemoryStore and the cluster store.
 * @param {object} sess an inflatable session
 * @returns {boolean}
 */
function cookieExpired (sess) {
  const expires = sess.cookie.expires
  return typeof expires === 'string' && new Date(expires).getTime() <= Date.now()
}

/** Without a callback, an operation returns a promise (as connect-redis does). */
function asPromise (store, op, args) {
  return new Promise(function run (resolve, reject) {
    store[op](...args, function answered (err, value) {
      if (err) reject(err)
      else resolve(value)
    })
  })
}

/**
 * connect-redis calls back inside its own try/catch and calls again with
 * whatever the callback threw: answer once, and let the app's exception escape.
 */
function tagErrors (cb, op) {
  if (typeof cb !== 'function') return cb
  const answer = callOnce(cb, op)
  return function redisAnswered (err, value) {
    answer(err ? toUnavailable(err, 'redis') : null, value)
  }
}

/**
 * The Redis target from the session options or REDIS_URL.
 * @param {object} options
 * @param {NodeJS.ProcessEnv} env
 * @returns {string|object|undefined}
 */
function redisTarget (options, env) {
  if (options.redis !== undefined && options.redis !== null && options.redis !== false) return options.redis
  return env.REDIS_URL || undefined
}

module.exports = { ClusterizeRedisStore, redisTarget, DEFAULT_PREFIX }
