'use strict'

/**
 * Real Redis topologies on loopback for the tests and the bench, started from
 * the redis-server binary on the machine (no mocks), in a temporary directory,
 * keeping nothing on disk (--save '' --appendonly no):
 *
 * - startRedisCluster(): a Redis Cluster, 3 masters + 3 replicas by default
 *   (redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes);
 * - startSentinel(): a primary, 2 replicas and 3 sentinels watching it.
 *
 * Every process is ours and is ended by PID (SIGKILL) in stop(), and again on
 * the test process's exit, pass or fail. Waits are bounded.
 */

const fs = require('fs')
const os = require('os')
const net = require('net')
const path = require('path')
const { spawn, execFile } = require('child_process')
const Redis = require('ioredis')
const { eventually } = require('./wait')
const { waitForPort } = require('./net')

const started = new Set()
process.on('exit', function killLeftovers () {
  for (const child of started) {
    try { process.kill(child.pid, 'SIGKILL') } catch {}
  }
})

/**
 * `count` distinct loopback ports the OS picked (port 0), all held open until
 * every one is chosen so none repeats; no fixed range that could collide with
 * other services on a contributor's machine. A cluster node's bus port is set
 * with `--cluster-port`, so it needs no `port + 10000`.
 * @param {number} count
 * @returns {Promise<number[]>}
 */
async function freePorts (count) {
  const servers = []
  try {
    for (let i = 0; i < count; i++) {
      const server = net.createServer()
      await new Promise((resolve, reject) => {
        server.once('error', reject)
        server.listen(0, '127.0.0.1', resolve)
      })
      servers.push(server)
    }
    return servers.map((server) => server.address().port)
  } finally {
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))))
  }
}

function tempDir (label) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `cz-${label}-`))
}

/** Start one redis-server (or sentinel) process; resolves once its port accepts. */
async function startServer (port, args, dir) {
  const child = spawn('redis-server', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] })
  started.add(child)
  let stderr = ''
  child.stderr.on('data', (chunk) => { stderr += chunk })
  child.once('exit', () => started.delete(child))
  const exited = new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => reject(new Error(`redis-server on port ${port} exited with ${code}: ${stderr.trim()}`)))
  })
  exited.catch(() => {})
  await Promise.race([waitForPort(port, { timeoutMs: 10000, what: `redis-server on port ${port}` }), exited])
  return { port, args, dir, child, get pid () { return child.pid }, get alive () { return child.exitCode === null && child.signalCode === null } }
}

function kill (server) {
  if (!server.alive) return Promise.resolve()
  const gone = new Promise((resolve) => server.child.once('exit', resolve))
  process.kill(server.pid, 'SIGKILL')
  return gone
}

function client (port, options) {
  const redis = new Redis(Object.assign({ port, host: '127.0.0.1', maxRetriesPerRequest: 1, retryStrategy: () => null, lazyConnect: false }, options))
  redis.on('error', () => {})
  return redis
}

/** Run one command on a node and disconnect. */
async function ask (port, ...command) {
  const redis = client(port)
  try {
    return await redis.call(...command)
  } finally {
    redis.disconnect()
  }
}

function run (file, args) {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 30000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${file} ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`))
      resolve(stdout)
    })
  })
}

const EPHEMERAL = ['--save', '', '--appendonly', 'no', '--bind', '127.0.0.1']

/**
 * A Redis Cluster on loopback.
 * @param {{ masters?: number, replicasPerMaster?: number, nodeTimeoutMs?: number, password?: string }} [options]
 */
async function startRedisCluster ({ masters = 3, replicasPerMaster = 1, nodeTimeoutMs = 1000, password } = {}) {
  const dir = tempDir('cluster')
  const nodes = masters * (1 + replicasPerMaster)
  const allPorts = await freePorts(nodes * 2)
  const ports = allPorts.slice(0, nodes)
  const busPortOf = new Map(ports.map((port, i) => [port, allPorts[nodes + i]]))
  const servers = new Map()
  const auth = password ? ['--requirepass', password, '--masterauth', password] : []
  const handle = {
    dir,
    ports,
    servers,
    /** The startup nodes, as ioredis takes them. */
    nodes: ports.map((port) => ({ host: '127.0.0.1', port })),
    /** A redis+cluster:// URL naming every node. */
    get url () {
      return `redis+cluster://${password ? `:${password}@` : ''}${ports.map((p) => `127.0.0.1:${p}`).join(',')}`
    },
    /** @returns {Promise<Array<{ port: number, role: string, slots: number }>>} */
    async roles () {
      const alive = ports.filter((port) => servers.get(port).alive)
      const text = await askWith(alive[0], 'CLUSTER', 'NODES')
      return text.trim().split('\n').map((line) => {
        const fields = line.split(' ')
        const port = Number(fields[1].split('@')[0].split(':')[1])
        return { port, role: fields[2].includes('master') ? 'master' : 'replica', failed: fields[2].includes('fail'), slots: fields.length - 8 }
      })
    },
    /** Port of the master serving `key`'s slot. */
    async masterFor (key) {
      const alive = ports.filter((port) => servers.get(port).alive)
      const slot = await askWith(alive[0], 'CLUSTER', 'KEYSLOT', key)
      const slots = await askWith(alive[0], 'CLUSTER', 'SLOTS')
      for (const [from, to, master] of slots) {
        if (slot >= from && slot <= to) return master[1]
      }
      throw new Error(`no master for slot ${slot}`)
    },
    /** Kill a master by PID and wait until its replica has taken over and the cluster is whole again. */
    async failOver (port, { timeoutMs = 20000 } = {}) {
      await kill(servers.get(port))
      await eventually(async () => {
        const alive = ports.filter((p) => servers.get(p).alive)
        for (const p of alive) {
          const info = await askWith(p, 'CLUSTER', 'INFO').catch(() => '')
          if (!/cluster_state:ok/.test(info)) return false
        }
        const roles = await handle.roles()
        const serving = roles.filter((r) => r.role === 'master' && !r.failed && r.slots > 0 && r.port !== port)
        return serving.length === masters
      }, { timeoutMs, what: `a replica to take over from master ${port}` })
    },
    /** Start the nodes killed by failOver() again; each rejoins as a replica (its nodes-<port>.conf is kept). */
    async restartKilled () {
      for (const port of ports) {
        const server = servers.get(port)
        if (!server.alive) servers.set(port, await startServer(port, server.args, dir))
      }
      await eventually(async () => {
        const roles = await handle.roles()
        return roles.filter((r) => r.role === 'replica' && !r.failed).length === masters * replicasPerMaster
      }, { timeoutMs: 20000, what: 'the restarted nodes to rejoin as replicas' })
    },
    /** Wait until every replica has what its master has (before a failover that must lose nothing). */
    async syncReplicas () {
      for (const port of ports) {
        if (!servers.get(port).alive) continue
        const info = await askWith(port, 'INFO', 'replication')
        if (/role:master/.test(info) && /connected_slaves:[1-9]/.test(info)) await askWith(port, 'WAIT', String(replicasPerMaster), '5000')
      }
    },
    async stop () {
      await Promise.all([...servers.values()].map(kill))
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
  function askWith (port, ...command) {
    const redis = client(port, password ? { password } : {})
    return redis.call(...command).finally(() => redis.disconnect())
  }
  try {
    for (const port of ports) {
      servers.set(port, await startServer(port, ['--port', String(port), ...EPHEMERAL, ...auth,
        '--cluster-enabled', 'yes', '--cluster-port', String(busPortOf.get(port)), '--cluster-config-file', `nodes-${port}.conf`,
        '--cluster-node-timeout', String(nodeTimeoutMs), '--cluster-replica-validity-factor', '0',
        '--dir', dir], dir))
    }
    await run('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`),
      '--cluster-replicas', String(replicasPerMaster), '--cluster-yes', ...(password ? ['-a', password, '--no-auth-warning'] : [])])
    await eventually(async () => {
      for (const port of ports) {
        const info = await askWith(port, 'CLUSTER', 'INFO').catch(() => '')
        if (!/cluster_state:ok/.test(info)) return false
      }
      const roles = await handle.roles()
      return roles.filter((r) => r.role === 'replica').length === masters * replicasPerMaster
    }, { timeoutMs: 20000, what: 'the Redis Cluster to form' })
  } catch (err) {
    await handle.stop()
    throw err
  }
  return handle
}

/**
 * A Sentinel-managed primary with replicas on loopback.
 * @param {{ replicas?: number, sentinels?: number, name?: string, downAfterMs?: number }} [options]
 */
async function startSentinel ({ replicas = 2, sentinels = 3, name = 'czprimary', downAfterMs = 1000 } = {}) {
  const dir = tempDir('sentinel')
  const ports = await freePorts(1 + replicas + sentinels)
  const dataPorts = ports.slice(0, 1 + replicas)
  const quorum = Math.floor(sentinels / 2) + 1
  const sentinelPorts = ports.slice(1 + replicas)
  const servers = new Map()
  /** @returns {Promise<number|null>} the primary's port as the sentinel at `port` names it, null when it does not answer */
  async function namedBy (port) {
    const answer = await ask(port, 'SENTINEL', 'get-master-addr-by-name', name).catch(() => null)
    return answer ? Number(answer[1]) : null
  }
  /** The primary's port as each live sentinel that answers names it. */
  async function sentinelViews () {
    const views = []
    for (const port of sentinelPorts) {
      if (!servers.get(port).alive) continue
      const named = await namedBy(port)
      if (named !== null) views.push(named)
    }
    return views
  }
  /** Is every live sentinel done with failing over, and does each name `primary`? (SENTINEL MASTER gives both.) */
  async function settledOn (primary) {
    let answered = 0
    for (const port of sentinelPorts) {
      if (!servers.get(port).alive) continue
      const fields = await ask(port, 'SENTINEL', 'MASTER', name).catch(() => null)
      if (!Array.isArray(fields)) return false
      const field = (key) => String(fields[fields.indexOf(key) + 1])
      if (Number(field('port')) !== primary || /failover_in_progress|s_down|o_down|promoted/.test(field('flags'))) return false
      answered++
    }
    return answered > 0
  }
  /**
   * Point every live node but `primary` at it. Where two sentinels' failover attempts overlap (seen
   * on a slow 2-core box with the 1 s down-after), one replica can be left a primary of nothing, or
   * replicating from another replica, and the sentinels, which see only the primary's replicas,
   * leave it so.
   */
  async function pointStraysAt (primary) {
    for (const port of dataPorts) {
      if (port === primary || !servers.get(port).alive) continue
      const info = await ask(port, 'INFO', 'replication').catch(() => null)
      if (info === null) continue
      if (/role:master/.test(info) || !new RegExp(`master_port:${primary}\\b`).test(info)) {
        await ask(port, 'REPLICAOF', '127.0.0.1', String(primary)).catch(() => {})
      }
    }
  }
  /** Wait until every live sentinel names `primary` with no failover under way; re-point one that has not after 10 s. */
  async function sentinelsAgreeOn (primary) {
    const agreed = () => settledOn(primary)
    try {
      await eventually(agreed, { timeoutMs: 10000, what: `every sentinel to name ${primary} as the primary` })
      return
    } catch {}
    for (const port of sentinelPorts) {
      if (!servers.get(port).alive || await namedBy(port) === primary) continue
      await ask(port, 'SENTINEL', 'REMOVE', name).catch(() => {})
      await ask(port, 'SENTINEL', 'MONITOR', name, '127.0.0.1', String(primary), String(quorum))
      await ask(port, 'SENTINEL', 'SET', name, 'down-after-milliseconds', String(downAfterMs), 'failover-timeout', '5000', 'parallel-syncs', String(replicas))
    }
    await eventually(agreed, { timeoutMs: 10000, what: `every sentinel to name ${primary} as the primary, after re-pointing the ones that did not` })
  }
  const handle = {
    dir,
    name,
    dataPorts,
    sentinelPorts,
    servers,
    /** ioredis options for this primary. */
    get options () {
      return { sentinels: sentinelPorts.map((port) => ({ host: '127.0.0.1', port })), name }
    },
    get url () {
      return `redis+sentinel://${sentinelPorts.map((p) => `127.0.0.1:${p}`).join(',')}/${name}`
    },
    /**
     * The port most of the live sentinels name as the primary. Right after a failover one
     * sentinel can still name the old primary for a while: asking only the first one misses
     * the failover, or worse, restarts the old primary while a sentinel still takes it for the
     * primary (it then turns it back into one, and the others' replicas follow it into a loop).
     * @returns {Promise<number>}
     */
    async primaryPort () {
      const views = await sentinelViews()
      const counts = new Map()
      for (const port of views) counts.set(port, (counts.get(port) || 0) + 1)
      for (const [port, count] of counts) if (count > views.length / 2) return port
      throw new Error(views.length === 0 ? 'no sentinel answered' : `the sentinels disagree on the primary: ${views.join(', ')}`)
    },
    async syncReplicas () {
      await ask(await handle.primaryPort(), 'WAIT', String(replicas), '5000')
    },
    /**
     * Start the primary killed by failOver() again, as a replica of the new one; wait until it has
     * synced. First every live sentinel must name the new primary and have no failover in
     * progress (see sentinelsAgreeOn()): a node back at the address a sentinel still took for
     * the primary was seen made the primary again, with the others replicating in a loop.
     */
    async restartKilled () {
      const primary = await handle.primaryPort()
      await sentinelsAgreeOn(primary)
      for (const port of dataPorts) {
        const server = servers.get(port)
        if (server.alive) continue
        servers.set(port, await startServer(port, ['--port', String(port), ...EPHEMERAL, '--dir', dir, '--replicaof', '127.0.0.1', String(primary)], dir))
      }
      // Asked afresh each time: on a slow box the sentinels' 1 s down-after can fail over once
      // more while the restarted node syncs, and then the replicas follow the next primary.
      await eventually(async () => {
        const current = await handle.primaryPort().catch(() => null)
        if (current === null) return false
        await pointStraysAt(current)
        const info = await ask(current, 'INFO', 'replication').catch(() => '')
        return /role:master/.test(info) && new RegExp(`connected_slaves:${replicas}`).test(info) && !/state=(wait_bgsave|send_bulk)/.test(info)
      }, { timeoutMs: 30000, what: 'the old primary to rejoin as a replica' })
    },
    /**
     * Kill the primary by PID and wait until the sentinels have promoted a replica that accepts
     * writes. Up to a minute: where the sentinels' leader election splits, each retries only
     * after twice the failover-timeout (seen to take over 30 s on a slow 2-core box).
     */
    async failOver ({ timeoutMs = 60000 } = {}) {
      const old = await handle.primaryPort()
      await kill(servers.get(old))
      return eventually(async () => {
        const port = await handle.primaryPort().catch(() => old)
        if (port === old) return false
        const info = await ask(port, 'INFO', 'replication').catch(() => '')
        return /role:master/.test(info) ? port : false
      }, { timeoutMs, what: `the sentinels to promote a replica of ${old}` })
    },
    async stop () {
      await Promise.all([...servers.values()].map(kill))
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
  try {
    const [primary, ...replicaPorts] = dataPorts
    servers.set(primary, await startServer(primary, ['--port', String(primary), ...EPHEMERAL, '--dir', dir], dir))
    for (const port of replicaPorts) {
      servers.set(port, await startServer(port, ['--port', String(port), ...EPHEMERAL, '--dir', dir, '--replicaof', '127.0.0.1', String(primary)], dir))
    }
    await eventually(async () => {
      const info = await ask(primary, 'INFO', 'replication')
      return new RegExp(`connected_slaves:${replicas}`).test(info)
    }, { timeoutMs: 15000, what: 'the replicas to connect' })
    for (const port of sentinelPorts) {
      const file = path.join(dir, `sentinel-${port}.conf`)
      fs.writeFileSync(file, [
        `port ${port}`, 'bind 127.0.0.1', `dir ${dir}`,
        `sentinel monitor ${name} 127.0.0.1 ${primary} ${quorum}`,
        `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
        `sentinel failover-timeout ${name} 5000`,
        `sentinel parallel-syncs ${name} ${replicas}`
      ].join('\n') + '\n')
      servers.set(port, await startServer(port, [file, '--sentinel'], dir))
    }
    await eventually(async () => {
      for (const port of sentinelPorts) {
        const info = await ask(port, 'INFO', 'sentinel').catch(() => '')
        if (!new RegExp(`status=ok,address=127.0.0.1:${primary},slaves=${replicas},sentinels=${sentinels}`).test(info)) return false
      }
      return true
    }, { timeoutMs: 20000, what: 'the sentinels to see the primary, its replicas and each other' })
  } catch (err) {
    await handle.stop()
    throw err
  }
  return handle
}

module.exports = { startRedisCluster, startSentinel }
