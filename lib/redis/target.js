'use strict'

/**
 * What a `redis` option (session({ redis }), bus.redis, REDIS_URL, --redis)
 * may be, checked at startup and normalised into one of:
 *
 *   { kind: 'node', url | options }          one Redis server
 *   { kind: 'sentinel', options }            a Sentinel-managed primary
 *   { kind: 'cluster', nodes, options }      a Redis Cluster
 *   { kind: 'client', client }               an ioredis Redis instance
 *   { kind: 'cluster-client', client }       an ioredis Cluster instance
 *
 * URL forms:
 *   redis://[[user]:password@]host[:port][/db]           (rediss:// for TLS)
 *   redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/name[/db]
 *       [?sentinelUsername=..&sentinelPassword=..]      (rediss+sentinel:// for TLS)
 *   redis+cluster://[[user]:password@]host[:port][,host[:port]...]
 *                                                         (rediss+cluster:// for TLS)
 * redis-sentinel:// and redis-cluster:// (Lettuce's spelling) are accepted too.
 * A password in the URL is the data nodes' (requirepass / ACL user); the
 * sentinels' own credentials go in the query.
 */

const { ClusterizeOptionError } = require('../errors')

const DEFAULT_PORT = 6379
const DEFAULT_SENTINEL_PORT = 26379
const SCHEMES = {
  redis: { kind: 'node', tls: false },
  rediss: { kind: 'node', tls: true },
  'redis+sentinel': { kind: 'sentinel', tls: false },
  'redis-sentinel': { kind: 'sentinel', tls: false },
  'rediss+sentinel': { kind: 'sentinel', tls: true },
  'rediss-sentinel': { kind: 'sentinel', tls: true },
  'redis+cluster': { kind: 'cluster', tls: false },
  'redis-cluster': { kind: 'cluster', tls: false },
  'rediss+cluster': { kind: 'cluster', tls: true },
  'rediss-cluster': { kind: 'cluster', tls: true }
}
const SENTINEL_QUERY = ['sentinelUsername', 'sentinelPassword']
const ACCEPTED = 'a redis://, rediss://, redis+sentinel:// or redis+cluster:// URL, ioredis options ' +
  '(with `sentinels` and `name` for Sentinel), a list of cluster nodes or { nodes: [...], ...ClusterOptions }, ' +
  'or an ioredis Redis or Cluster instance'

/** @returns {boolean} an ioredis Cluster instance */
function isClusterClient (value) {
  return value !== null && typeof value === 'object' && value.isCluster === true && typeof value.nodes === 'function'
}

/** @returns {boolean} an ioredis Redis instance (or something that quacks like one) */
function isRedisClient (value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value) &&
    typeof value.get === 'function' && typeof value.set === 'function' &&
    typeof value.on === 'function' && typeof value.status === 'string'
}

/**
 * A node-redis client (package `redis`: createClient, createCluster,
 * createSentinel, v4 to v5). It has get/set/on like ioredis but no `status`,
 * so without this check it would be read as ioredis options: sessions would
 * go to 127.0.0.1:6379, whatever server the client was made for.
 * @returns {boolean}
 */
function isNodeRedisClient (value) {
  return value !== null && typeof value === 'object' && typeof value.sendCommand === 'function' &&
    typeof value.status !== 'string' && ('isOpen' in value || 'masters' in value)
}

/**
 * Some other client or class instance: options are plain objects, and reading
 * anything else as options would connect somewhere the user did not ask.
 * @returns {boolean}
 */
function isForeignObject (value) {
  const proto = Object.getPrototypeOf(value)
  return proto !== Object.prototype && proto !== null
}

/** Why a client object we do not speak is refused, and what to pass instead. */
function foreignClientProblem (value, prefix) {
  const nodeRedis = isNodeRedisClient(value)
  const what = nodeRedis
    ? 'is a node-redis client (package "redis"); clusterize speaks ioredis and cannot use it'
    : `is ${describeInstance(value)}, neither ioredis options nor an ioredis client`
  const url = nodeRedis && value.options && typeof value.options.url === 'string' ? ` (this client's is "${redact(value.options.url)}")` : ''
  const store = prefix === 'session'
    ? '; or, to keep this client, build connect-redis\'s RedisStore on it and pass that as the `store` option'
    : ''
  return `${what}. Pass its URL instead${url}, ioredis options or an ioredis Redis or Cluster instance${store}`
}

function describeInstance (value) {
  const name = value.constructor && typeof value.constructor.name === 'string' ? value.constructor.name : ''
  return name && name !== 'Object' ? `a ${name} instance` : 'an object with a prototype'
}

/**
 * Check and normalise a Redis target.
 * @param {*} value
 * @param {string} option the option's name, for the error ('redis', 'bus.redis', 'REDIS_URL')
 * @param {string} [prefix='clusterize'] what the error message starts with
 * @returns {{ kind: string, url?: string, options?: object, nodes?: Array, client?: object }}
 * @throws {ClusterizeOptionError} naming the option and what is wrong
 */
function parseRedisTarget (value, option, prefix) {
  const fail = (problem) => new ClusterizeOptionError(`${prefix || 'clusterize'}: option "${option}" ${problem}`, option)
  if (isClusterClient(value)) return { kind: 'cluster-client', client: value }
  if (isRedisClient(value)) return { kind: 'client', client: value }
  if (typeof value === 'string') return parseUrl(value.trim(), fail)
  if (Array.isArray(value)) return { kind: 'cluster', nodes: checkNodes(value, fail), options: {} }
  if (value === null || typeof value !== 'object') throw fail(`must be ${ACCEPTED}; got ${value === null ? 'null' : typeof value}`)
  if (isNodeRedisClient(value) || isForeignObject(value)) throw fail(foreignClientProblem(value, prefix))
  if (value.nodes !== undefined) {
    if (!Array.isArray(value.nodes)) throw fail('has `nodes`, so it is a Redis Cluster configuration: `nodes` must be a list of "host:port" strings or { host, port } objects')
    const options = Object.assign({}, value)
    delete options.nodes
    return { kind: 'cluster', nodes: checkNodes(value.nodes, fail), options }
  }
  if (value.sentinels !== undefined) {
    checkSentinelOptions(value, fail)
    return { kind: 'sentinel', options: Object.assign({}, value) }
  }
  if (value.name !== undefined && typeof value.name === 'string' && value.host === undefined && value.port === undefined && value.path === undefined) {
    throw fail('has `name` but no `sentinels`: a Sentinel configuration needs both, e.g. { sentinels: [{ host: "10.0.0.1", port: 26379 }], name: "mymaster" }')
  }
  return { kind: 'node', options: Object.assign({}, value) }
}

function parseUrl (text, fail) {
  const match = /^([a-z+-]+):\/\/(?:([^@/]*)@)?([^/?#]*)(\/[^?#]*)?(?:\?([^#]*))?$/i.exec(text)
  const scheme = match && SCHEMES[match[1].toLowerCase()]
  if (!scheme) {
    throw fail(`must be ${ACCEPTED}; got "${redact(text)}"` +
      (/^[a-z+-]+:\/\//i.test(text) ? '' : ' (a URL needs its scheme, e.g. redis://127.0.0.1:6379)'))
  }
  const [, , userinfo, hostList, pathname, query] = match
  if (scheme.kind === 'node') {
    try {
      const url = new URL(text)
      if (!url.hostname) throw new Error('no host')
    } catch (err) {
      throw fail(`is not a valid Redis URL ("${redact(text)}"): ${err.message}`)
    }
    return { kind: 'node', url: text }
  }
  const credentials = parseUserinfo(userinfo, fail)
  const defaultPort = scheme.kind === 'sentinel' ? DEFAULT_SENTINEL_PORT : DEFAULT_PORT
  const hosts = hostList.split(',').filter((part) => part !== '').map((part) => parseHost(part, defaultPort, fail))
  if (hosts.length === 0) throw fail(`("${redact(text)}") names no host: list them as host:port,host:port`)
  const params = new URLSearchParams(query || '')
  const tls = scheme.tls ? { tls: {} } : {}

  if (scheme.kind === 'cluster') {
    for (const key of params.keys()) throw fail(`("${redact(text)}"): unknown query parameter "${key}" (a redis+cluster:// URL takes none)`)
    const path = (pathname || '').replace(/\/+$/, '')
    if (path !== '' && path !== '/0') throw fail(`("${redact(text)}"): a Redis Cluster has only database 0, so the URL has no path`)
    const redisOptions = Object.assign({}, credentials, tls)
    return { kind: 'cluster', nodes: hosts, options: Object.keys(redisOptions).length ? { redisOptions } : {} }
  }

  const segments = (pathname || '').split('/').filter((part) => part !== '')
  if (segments.length === 0 || segments.length > 2) {
    throw fail(`("${redact(text)}") needs the monitored name as its path: redis+sentinel://host:26379,host:26379/mymaster[/db]`)
  }
  const options = Object.assign({ sentinels: hosts, name: decodeURIComponent(segments[0]) }, credentials, tls)
  if (segments.length === 2) {
    const db = Number(segments[1])
    if (!Number.isInteger(db) || db < 0) throw fail(`("${redact(text)}"): the database "${segments[1]}" is not a number`)
    options.db = db
  }
  for (const [key, value] of params) {
    if (!SENTINEL_QUERY.includes(key)) throw fail(`("${redact(text)}"): unknown query parameter "${key}" (accepted: ${SENTINEL_QUERY.join(', ')})`)
    options[key] = value
  }
  if (scheme.tls) {
    options.sentinelTLS = {}
    options.enableTLSForSentinelMode = true
  }
  return { kind: 'sentinel', options }
}

function parseUserinfo (userinfo, fail) {
  if (!userinfo) return {}
  const colon = userinfo.indexOf(':')
  try {
    const username = decodeURIComponent(colon === -1 ? userinfo : userinfo.slice(0, colon))
    const password = colon === -1 ? '' : decodeURIComponent(userinfo.slice(colon + 1))
    const out = {}
    // redis://secret@host means the password, as redis-cli and ioredis read it.
    if (colon === -1) out.password = username
    else {
      if (username) out.username = username
      if (password) out.password = password
    }
    return out
  } catch (err) {
    throw fail(`has badly escaped credentials: ${err.message}`)
  }
}

function parseHost (part, defaultPort, fail) {
  const match = /^(?:\[([0-9a-f:.]+)\]|([^:[\]]+))(?::(\d+))?$/i.exec(part)
  if (!match) throw fail(`names the host "${part}", which is not host or host:port`)
  const port = match[3] === undefined ? defaultPort : Number(match[3])
  if (!(port >= 1 && port <= 65535)) throw fail(`names the port ${match[3]} (host "${part}"), outside 1-65535`)
  return { host: match[1] || match[2], port }
}

function checkNodes (nodes, fail) {
  if (nodes.length === 0) throw fail('lists no Redis Cluster node: give at least one "host:port" (more, so that startup survives one being down)')
  return nodes.map(function checkNode (node) {
    if (typeof node === 'number') return parseHost(`127.0.0.1:${node}`, DEFAULT_PORT, fail)
    if (typeof node === 'string') {
      const bare = node.replace(/^rediss?:\/\//i, '').replace(/\/$/, '')
      return parseHost(bare.replace(/^[^@]*@/, ''), DEFAULT_PORT, fail)
    }
    if (node && typeof node === 'object' && (node.host === undefined || typeof node.host === 'string') &&
      (node.port === undefined || (Number.isInteger(node.port) && node.port >= 1 && node.port <= 65535))) {
      return Object.assign({ host: '127.0.0.1', port: DEFAULT_PORT }, node)
    }
    throw fail(`lists the Redis Cluster node ${JSON.stringify(node)}: a node is "host:port" or { host, port }`)
  })
}

function checkSentinelOptions (options, fail) {
  const sentinels = options.sentinels
  if (!Array.isArray(sentinels) || sentinels.length === 0) {
    throw fail('has `sentinels`, so it is a Sentinel configuration: `sentinels` must be a non-empty list of { host, port }')
  }
  for (const sentinel of sentinels) {
    if (!sentinel || typeof sentinel !== 'object' || (sentinel.host !== undefined && typeof sentinel.host !== 'string') ||
      (sentinel.port !== undefined && !(Number.isInteger(sentinel.port) && sentinel.port >= 1 && sentinel.port <= 65535))) {
      throw fail(`lists the sentinel ${JSON.stringify(sentinel)}: a sentinel is { host, port }`)
    }
  }
  if (typeof options.name !== 'string' || options.name === '') {
    throw fail('is a Sentinel configuration without `name`: give the name the sentinels monitor ("sentinel monitor <name> ..."), e.g. name: "mymaster"')
  }
}

/** The URL without its password, for errors and logs. */
function redact (text) {
  return text.replace(/\/\/([^@/]*):([^@/]*)@/, '//$1:***@').replace(/(sentinelPassword=)[^&#]*/, '$1***')
}

/**
 * A short, password-free description of a target, for logs and /stats.
 * @param {ReturnType<typeof parseRedisTarget>} target
 * @returns {string}
 */
function describeRedisTarget (target) {
  const hosts = (list) => list.map((node) => `${node.host || '127.0.0.1'}:${node.port || DEFAULT_PORT}`).join(',')
  switch (target.kind) {
    case 'node':
      if (target.url) return redact(target.url)
      return target.options.path ? `redis at ${target.options.path}` : `redis at ${target.options.host || '127.0.0.1'}:${target.options.port || DEFAULT_PORT}`
    case 'sentinel': return `sentinel "${target.options.name}" via ${hosts(target.options.sentinels)}`
    case 'cluster': return `cluster via ${hosts(target.nodes)}`
    case 'cluster-client': return 'cluster (client passed in)'
    default: return 'redis (client passed in)'
  }
}

/**
 * What the target points at, whoever built the client.
 * @returns {'node'|'sentinel'|'cluster'}
 */
function topologyOf (target) {
  if (target.kind === 'client') return 'node'
  if (target.kind === 'cluster-client') return 'cluster'
  return target.kind
}

/** @returns {boolean} whether the target is a Redis Cluster */
function isClusterTarget (target) {
  return target.kind === 'cluster' || target.kind === 'cluster-client'
}

module.exports = { parseRedisTarget, describeRedisTarget, topologyOf, isClusterTarget, isClusterClient, isRedisClient, isNodeRedisClient, redact }
