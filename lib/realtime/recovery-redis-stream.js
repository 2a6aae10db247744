'use strict'

/**
 * socket.io connection-state recovery with `bus.redis`: the Redis side of
 * the shared log, its streams, keys and scripts (./recovery-redis.js uses
 * this; read ./recovery-service.js first). The packet log and the persisted
 * sessions live in Redis, shared by every host, so a client cut from one
 * host recovers on another.
 *
 * - The log of a namespace is a Redis Stream (XADD ... MAXLEN ~ maxPackets).
 *   The entry id is the offset the client keeps: one order for every host.
 *   Every host's primary reads the streams (XREAD BLOCK, on a connection of
 *   its own) and sends the entries, in stream order, to its workers.
 * - A persisted session is a key with PX maxDisconnectionDuration; a sorted
 *   set per namespace bounds them by maxSessions (oldest dropped first).
 *   A restore takes it (GET and DEL in one script: it restores once) and
 *   reads the packets after the offset with XRANGE.
 *
 * Keys, all with one hash tag (one slot on a Redis Cluster, so XREAD over
 * several streams and the scripts stay on one node):
 *   {<bus.channel>}:sio:log:<nsp>        the stream of a namespace
 *   {<bus.channel>}:sio:s:<nsp>:<pid>     a persisted session
 *   {<bus.channel>}:sio:idx:<nsp>         its sessions by expiry (maxSessions)
 *   {<bus.channel>}:sio:wake              wakes the readers when a namespace is added
 *
 * Values are encoded with the bus codec (bus.serialization), one leading
 * byte naming it ('j' or 'a') so hosts with different settings read each
 * other's.
 */

const crypto = require('crypto')
const debug = require('debug')('clusterize:socket.io')
const { createCodec } = require('../bus/codec')
const { parseRedisTarget, describeRedisTarget, isClusterTarget } = require('../redis/target')
const { connectRedis, disconnectQuietly: quit } = require('../redis/connect')
const { explainRedisError } = require('../redis/explain')
const { RedisAvailability } = require('../redis/availability')
const { isStreamId, compareIds } = require('./recovery-log')

/** Commands fail after this instead of queueing: a broadcast then falls back to this host (see recovery-service.js). */
const COMMAND_TIMEOUT_MS = 2000
/** Entries read per XREAD. */
const READ_COUNT = 512
/** How many uids of entries read are remembered, to drop their copies (sent again after an outage, or over the bus bridge). */
const READ_UIDS_KEPT = 8192

/** SET the session with its expiry, index it, drop expired and over-the-bound ones. */
const PERSIST_SCRIPT = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]), ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  local old = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #old, 2 do redis.call('DEL', ARGV[6] .. old[i]) end
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1`

/** GET and DEL the session: it restores once. */
const TAKE_SCRIPT = `
local value = redis.call('GET', KEYS[1])
if value then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return value`

/** The key prefix of an app: the bus channel as a hash tag. */
function keyPrefix (channel) {
  return `{${channel}}:sio:`
}

/**
 * @param {object} options
 * @param {*} options.redis bus.redis
 * @param {string} options.channel bus.channel
 * @param {'json'|'advanced'} [options.serialization]
 * @param {number} [options.maxMessageBytes]
 * @param {{ info: Function, warn: Function }} options.log
 * @param {(nsp: string, id: string, m: object|null, here: boolean) => void} options.onEntry an entry read from a stream, in order
 *   (m null: only the position moves; here: this host delivered it itself, numbered here)
 * @param {(up: boolean, cause?: string) => void} [options.onStateChange]
 */
function createRedisStream (options) {
  const target = parseRedisTarget(options.redis, 'bus.redis')
  const where = describeRedisTarget(target)
  const prefix = keyPrefix(options.channel)
  const wakeKey = prefix + 'wake'
  const codec = createCodec({ serialization: options.serialization, maxMessageBytes: options.maxMessageBytes })
  const codecs = { [codec.name === 'advanced' ? 'a' : 'j']: codec }
  const tag = Buffer.from(codec.name === 'advanced' ? 'a' : 'j')
  /** This primary's name in entries: an entry it gave up on (XADD failed) is skipped when it shows up after all. */
  const instance = crypto.randomBytes(6).toString('base64url')
  let counter = 0
  /** @type {Map<string, number>} entry uid -> when this host delivered it itself */
  const skipped = new Map()
  /**
   * The uids of the latest entries read (bounded), with the id each was first read at: a copy
   * (sent again after an outage, or over the bus bridge) is dropped, and a restore skips it.
   * @type {Map<string, string>}
   */
  const readUids = new Map()
  /** @type {Map<string, { key: string, lastId: string|null, located: Promise|null }>} namespaces read, by name (located: the XREVRANGE in flight) */
  const streams = new Map()
  /** @type {Map<string, string>} stream key -> namespace */
  const names = new Map()
  let wakeId = null
  let wakeLocating = false
  let closed = false
  /** The command connection (lib/redis/availability.js); the service hears only of ups and of downs after an up. */
  const availability = new RedisAvailability({
    onChange: function stateChanged (up, cause, from) {
      if ((up || from === 'up') && options.onStateChange) options.onStateChange(up, cause)
    }
  })
  let reading = false

  const ownsClients = target.client === undefined
  const cmd = ownsClients ? connectRedis(target, { timeoutMs: COMMAND_TIMEOUT_MS }) : target.client
  const reader = ownsClients ? connectRedis(target) : (isClusterTarget(target) ? target.client.duplicate([], {}) : target.client.duplicate())
  cmd.on('error', (err) => onError('command', err))
  cmd.on('close', () => { if (!closed && availability.isUp) availability.markDown('connection closed') })
  reader.on('error', (err) => onError('reader', err))
  cmd.on('ready', onReady)
  if (cmd.status === 'ready') process.nextTick(onReady)

  function onError (which, err) {
    if (closed) return
    debug('recovery: redis %s error: %s', which, err.message)
    if (which === 'command') availability.markDown(explainRedisError(err))
  }

  function onReady () {
    if (closed) return
    availability.markUp()
    locateAll()
  }

  /**
   * Locate the wake stream (then start the read loop) and every namespace not
   * located yet. The XREVRANGEs are sent in this tick: any XADD of this host
   * comes after them on the connection, so after the position they return.
   */
  function locateAll () {
    if (closed || cmd.status !== 'ready') return
    if (wakeId === null && !wakeLocating) {
      wakeLocating = true
      cmd.xrevrange(wakeKey, '+', '-', 'COUNT', 1).then((last) => {
        wakeLocating = false
        if (wakeId === null) wakeId = last.length ? last[0][0] : '0-0'
        if (!reading) read()
      }, (err) => {
        wakeLocating = false
        debug('recovery: cannot locate %s: %s', wakeKey, err.message)
      })
    }
    for (const name of streams.keys()) locate(name)
  }

  /**
   * Read a namespace's stream after its last entry now: entries before are
   * none of this host's business (no socket of this namespace is here yet).
   * This host's XADDs to it wait for the answer (see append()), so they come
   * after that position whatever retries the client makes meanwhile.
   */
  function locate (name) {
    const stream = streams.get(name)
    if (stream.lastId !== null || stream.located !== null || cmd.status !== 'ready') return
    const located = stream.located = cmd.xrevrange(stream.key, '+', '-', 'COUNT', 1).then((last) => {
      stream.located = null
      if (stream.lastId === null) stream.lastId = last.length ? last[0][0] : '0-0'
      debug('recovery: reading %s after %s', stream.key, stream.lastId)
    }, (err) => {
      stream.located = null
      debug('recovery: cannot start reading %s: %s', stream.key, err.message)
      throw err
    })
    // Wake the readers blocked on the streams they knew (ours included) so they add this one.
    located.then(() => cmd.xadd(wakeKey, 'MAXLEN', '~', 100, '*', 'n', name))
      .then(() => cmd.pexpire(wakeKey, 24 * 3600 * 1000))
      .catch((err) => debug('recovery: cannot wake the readers: %s', err.message))
  }

  /** The read loop: one XREAD BLOCK at a time on the reader's connection, for as long as we run. */
  async function read () {
    reading = true
    while (!closed) {
      const keys = [wakeKey]
      const ids = [wakeId]
      for (const stream of streams.values()) {
        if (stream.lastId === null) continue
        keys.push(stream.key)
        ids.push(stream.lastId)
      }
      let reply
      try {
        reply = await reader.xreadBuffer('COUNT', READ_COUNT, 'BLOCK', 0, 'STREAMS', ...keys, ...ids)
      } catch (err) {
        if (closed) break
        debug('recovery: XREAD failed: %s', err.message)
        await new Promise((resolve) => setTimeout(resolve, 200).unref())
        continue
      }
      if (reply === null || closed) continue
      for (const [keyBuffer, entries] of reply) {
        const key = keyBuffer.toString()
        if (key === wakeKey) {
          if (entries.length) wakeId = entries[entries.length - 1][0].toString()
          continue
        }
        const name = names.get(key)
        const stream = streams.get(name)
        for (const [idBuffer, fields] of entries) {
          const id = idBuffer.toString()
          stream.lastId = id
          const entry = parseEntry(fields)
          const uid = entry === null ? undefined : entry.u
          // Delivered here already (this host numbered it, or read it before: a copy), or malformed: only the position moves.
          const mine = uid !== undefined && skipped.delete(uid)
          const copy = uid !== undefined && readUids.has(uid)
          if (uid !== undefined) remember(uid, id)
          options.onEntry(name, id, entry === null || mine || copy ? null : entry.m, mine && !copy)
        }
      }
    }
    reading = false
  }

  function remember (uid, id) {
    if (readUids.has(uid)) return
    readUids.set(uid, id)
    if (readUids.size > READ_UIDS_KEPT) readUids.delete(readUids.keys().next().value)
  }

  /** @returns {{ u?: string, m: object }|null} */
  function parseEntry (fields) {
    let u
    let d
    for (let i = 0; i < fields.length; i += 2) {
      const field = fields[i].toString()
      if (field === 'u') u = fields[i + 1].toString()
      else if (field === 'd') d = fields[i + 1]
    }
    try {
      return { u, m: decode(d) }
    } catch (err) {
      debug('recovery: ignoring a malformed stream entry: %s', err.message)
      return null
    }
  }

  function encode (topic, value) {
    const payload = codec.encode(topic, value, 'socket.io recovery state')
    return Buffer.concat([tag, typeof payload === 'string' ? Buffer.from(payload) : payload])
  }

  function decode (buffer) {
    if (!Buffer.isBuffer(buffer) || buffer.length < 2) throw new Error('empty value')
    const name = String.fromCharCode(buffer[0])
    let theirs = codecs[name]
    if (theirs === undefined) {
      if (name !== 'j' && name !== 'a') throw new Error(`unknown serialization ${name}`)
      theirs = codecs[name] = createCodec({ serialization: name === 'a' ? 'advanced' : 'json', maxMessageBytes: codec.maxMessageBytes })
    }
    const body = buffer.subarray(1)
    return theirs.decode(theirs.name === 'json' ? body.toString('utf8') : body)
  }

  const streamKey = (name) => prefix + 'log:' + name
  const sessionPrefix = (name) => prefix + 's:' + name + ':'
  const indexKey = (name) => prefix + 'idx:' + name

  return {
    where,
    prefix,
    /** The command connection is up: broadcasts go through the streams. */
    get ready () { return !closed && cmd.status === 'ready' },

    /** The last entry of `name` this host has sent to its workers (null until its stream is located). */
    lastDelivered (name) {
      const stream = streams.get(name)
      return stream === undefined ? null : stream.lastId
    },

    /** Read the stream of namespace `name` from now on. */
    register (name) {
      if (streams.has(name)) return
      const key = streamKey(name)
      streams.set(name, { key, lastId: null, located: null })
      names.set(key, name)
      locateAll()
    },

    /** A new entry uid of this host (a packet numbered here that goes to the stream later). */
    mint () {
      return `${instance}.${++counter}`
    },

    /**
     * Add a packet to the namespace's stream; it comes back through the reader.
     * Throws (sync) when the bus codec refuses the message.
     * @param {string} [uid] the packet's uid when it was minted before (sent again): readers drop a second copy
     * @returns {{ uid: string, added: Promise<string> }} the entry's uid, and its id once Redis took it
     */
    append (name, m, maxPackets, uid) {
      const key = streamKey(name)
      const payload = encode(key, m)
      if (uid === undefined) uid = `${instance}.${++counter}`
      const add = () => cmd.xadd(key, 'MAXLEN', '~', maxPackets, '*', 'u', uid, 'd', payload)
      const stream = streams.get(name)
      if (stream !== undefined && stream.lastId === null) {
        // Not located yet: after it (in order: the callbacks run in the order they were added).
        locate(name)
        if (stream.located !== null) return { uid, added: stream.located.then(add) }
      }
      return { uid, added: add() }
    },

    /** This host delivered entry `uid` itself (numbered here): skip it when it shows up in the stream. */
    skip (uid) {
      // Moved to the end: the expiry in trim() goes oldest first.
      skipped.delete(uid)
      skipped.set(uid, Date.now())
    },

    /** @returns {string|undefined} the id entry `uid` was first read at, if this reader read it */
    readAt (uid) {
      return readUids.get(uid)
    },

    /** @returns {boolean} entry `uid` was read from the stream, or delivered by this host itself */
    wasRead (uid) {
      return readUids.has(uid) || skipped.has(uid)
    },

    /**
     * A copy of an entry read before (sent again after an outage): the id of the first one
     * read differs. A restore skips the copy: this host's clients got the packet there.
     * @param {string|undefined} uid
     * @param {string} id
     * @returns {boolean}
     */
    isCopy (uid, id) {
      if (uid === undefined) return false
      const first = readUids.get(uid)
      return first !== undefined && first !== id
    },

    /**
     * The uids of the entries of `name` from `fromId` to `toId` that the stream still holds
     * (what a Redis that restarted kept).
     * @returns {Promise<Set<string>>}
     */
    kept (name, fromId, toId) {
      return cmd.xrangeBuffer(streamKey(name), fromId, toId).then((entries) => {
        const uids = new Set()
        for (const [, fields] of entries) {
          for (let i = 0; i < fields.length; i += 2) {
            if (fields[i].toString() === 'u') uids.add(fields[i + 1].toString())
          }
        }
        return uids
      })
    },

    /**
     * Entry `uid` is about to be delivered by another way than this reader (this host's own
     * broadcast its reader has not reached, or, from an earlier clusterize, another host's
     * over the bus bridge): false if this host read it from the stream already (drop it);
     * else true, and the entry is skipped when it shows up in the stream.
     * @param {string} uid
     * @returns {boolean} deliver it
     */
    claim (uid) {
      if (readUids.has(uid)) return false
      this.skip(uid)
      return true
    },

    persist (name, session, ttlMs, maxSessions) {
      const key = sessionPrefix(name) + session.pid
      return cmd.eval(PERSIST_SCRIPT, 2, key, indexKey(name), encode(key, session), Math.ceil(ttlMs), Date.now(), maxSessions, session.pid, sessionPrefix(name))
    },

    /** @returns {Promise<object|null>} the session of `pid`, taken out of Redis (it restores once) */
    take (name, pid) {
      return cmd.evalBuffer(TAKE_SCRIPT, 2, sessionPrefix(name) + pid, indexKey(name), pid).then((value) => value === null ? null : decode(value))
    },

    /**
     * The entries of `name` from `offset` to `head` included.
     * @returns {Promise<Array<[string, object, string|undefined]>>} [id, m, uid]
     */
    range (name, offset, head) {
      return cmd.xrangeBuffer(streamKey(name), offset, head).then((entries) => entries.map(([id, fields]) => {
        const entry = parseEntry(fields)
        return entry === null ? [id.toString(), null, undefined] : [id.toString(), entry.m, entry.u]
      }))
    },

    /** Expire what is older than maxDisconnectionDuration (called every few seconds). */
    trim (name, maxAgeMs, now) {
      if (cmd.status !== 'ready') return
      for (const [uid, at] of skipped) {
        if (at >= now - maxAgeMs) break
        skipped.delete(uid)
      }
      const key = streamKey(name)
      cmd.xtrim(key, 'MINID', '~', `${Math.max(0, now - maxAgeMs)}-0`).then(
        () => cmd.pexpire(key, Math.ceil(maxAgeMs) + 60000),
        (err) => debug('recovery: XTRIM %s failed: %s', key, err.message)
      ).catch(() => {})
    },

    close () {
      if (closed) return Promise.resolve()
      closed = true
      const closing = [quit(reader)]
      if (ownsClients) closing.push(quit(cmd))
      return Promise.all(closing).then(() => undefined)
    }
  }
}

module.exports = { createRedisStream, isStreamId, compareIds, keyPrefix }
