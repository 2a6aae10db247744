// A CommonJS TypeScript consumer using require().
import cz = require('clusterize-express')

const handle = cz.clusterize(() => require('express')(), { workers: 0 })
if ('stats' in handle) console.log(handle.stats().workers.length, handle.stats().sessions?.bytes)
cz.session({ store: 'cluster', prefix: 'admin:', maxTotalBytes: 64 * 1024 * 1024, maxSessionBytes: 64 * 1024 })
cz.bus.on('topic', (data: unknown) => console.log(data))
// Reloads: a new worker silent for reload.heartbeatTimeoutMs fails the reload (#23).
cz.clusterize(() => require('express')(), { reload: { bakeMs: 3000, heartbeatTimeoutMs: 2500 }, health: { maxHeapRatio: 0.85 } })
// @ts-expect-error reload.heartbeatTimeoutMs is a number of milliseconds
cz.clusterize(() => require('express')(), { reload: { heartbeatTimeoutMs: '3s' } })

// @ts-expect-error port must be a number or numeric string
cz.clusterize(() => require('express')(), { port: { value: 1 } })

cz.clusterize(() => require('express')(), { workers: 2, spare: 1, reload: { bakeMs: 3000 } })
cz.clusterize(() => require('express')(), { maxIdleConnections: 'auto' })
cz.clusterize(() => require('express')(), { maxIdleConnections: 2000 })
cz.clusterize(() => require('express')(), { slowBody: { minBytesPerSecond: 1024, graceMs: 10000 } })
// @ts-expect-error slowBody.minBytesPerSecond is a number
cz.clusterize(() => require('express')(), { slowBody: { minBytesPerSecond: 'slow' } })
// @ts-expect-error maxIdleConnections is a number or 'auto'
cz.clusterize(() => require('express')(), { maxIdleConnections: 'lots' })
cz.clusterize(() => require('express')(), { maxSemiSpaceMB: 0 })
// @ts-expect-error maxSemiSpaceMB is a number of megabytes
cz.clusterize(() => require('express')(), { maxSemiSpaceMB: '16m' })
if ('stats' in handle) {
  // The primary's held connections and the dashboard's streams (#23).
  const { connections, dashboard } = handle.stats()
  if (connections) console.log(connections.pending + connections.pendingShed + connections.awaiting + connections.awaitingShed)
  if (dashboard) console.log(dashboard.open + dashboard.evicted + dashboard.refused + dashboard.historyRefused)
  // @ts-expect-error the stream counters are numbers
  if (dashboard) dashboard.open.toUpperCase()
}
if ('stats' in handle) {
  // Which worker runs each singleton() job, its token, and where the lease lives (#25).
  for (const job of handle.stats().singletons ?? []) {
    if (job.state === 'held' && job.worker) console.log(job.name, job.worker.slot, job.worker.pid, job.token, job.since, job.heldMs)
    const lease: 'local' | 'redis' = job.lease
    console.log(lease, job.waiting)
    // @ts-expect-error the state is one of four strings
    if (job.state === 'running') console.log(job.name)
  }
}
if ('stats' in handle) {
  const beat = handle.stats().workers[0].heartbeat
  if (beat) console.log(beat.idleConnections + beat.idleShed, beat.fdExhausted === true)
}
const balanced = cz.clusterize(() => require('express')(), { workers: 4, scheduling: 'balanced' })
if ('stats' in balanced) {
  const load = balanced.stats().workers[0].balance
  if (load && load.accepting) console.log(load.open, load.limit)
}
// @ts-expect-error workers is a number or 'auto' (strings from WORKERS are parsed at run time)
cz.clusterize(() => require('express')(), { workers: 'many' })

// Redis targets: one node, Sentinel, Cluster (URL, options, node list, client).
import IORedis = require('ioredis')
cz.session({ redis: 'redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster' })
cz.session({ redis: { sentinels: [{ host: '10.0.0.1', port: 26379 }], name: 'mymaster', password: 'pw' } })
cz.session({ redis: ['10.0.0.1:7000', { host: '10.0.0.2', port: 7000 }] })
cz.session({ redis: { nodes: [{ host: '10.0.0.1', port: 7000 }], redisOptions: { password: 'pw' } } })
cz.session({ redis: new IORedis.Cluster([{ host: '10.0.0.1', port: 7000 }], { lazyConnect: true }) })
cz.clusterize(() => require('express')(), { bus: { redis: 'redis+cluster://10.0.0.1:7000,10.0.0.2:7000', shardedPubSub: 'auto' } })
// @ts-expect-error shardedPubSub is 'auto' or false
cz.clusterize(() => require('express')(), { bus: { shardedPubSub: true } })
// The primary's bounds for the cluster store and socket.io recovery, validated at startup.
cz.clusterize(() => require('express')(), { clusterStore: { maxSessions: 50000, maxTotalBytes: 64 * 1024 * 1024 }, recovery: { maxPackets: 1000, maxSessions: 5000, liveWaitMs: 2000 } })
// @ts-expect-error clusterStore.maxSessions is a number
cz.clusterize(() => require('express')(), { clusterStore: { maxSessions: 'many' } })
// @ts-expect-error recovery has no such bound
cz.clusterize(() => require('express')(), { recovery: { maxRooms: 1 } })
// @ts-expect-error a Redis target is not a number
cz.session({ redis: 6379 })
// metrics: the app's prom-client registries aggregated on the probes' /metrics.
import promClient = require('prom-client')
cz.clusterize(() => require('express')(), { metrics: { registries: [promClient.register], timeoutMs: 500, pushIntervalMs: 250 } })
cz.clusterize(() => require('express')(), { metrics: { registries: () => [new promClient.Registry()] } })
cz.clusterize(() => require('express')(), { metrics: false })
// @ts-expect-error a registry is an object with getMetricsAsJSON()
cz.clusterize(() => require('express')(), { metrics: { registries: ['default'] } })
// @ts-expect-error timeoutMs is a number
cz.clusterize(() => require('express')(), { metrics: { timeoutMs: '1s' } })
import nodeRedis = require('redis')
// A node-redis client is refused at startup (clusterize speaks ioredis); the types say so first.
// @ts-expect-error
cz.session({ redis: nodeRedis.createClient({ url: 'redis://10.0.0.1:6379' }) })
// @ts-expect-error
cz.clusterize(() => require('express')(), { bus: { redis: nodeRedis.createClient() } })
// clusterize-express/socket.io: the adapter and its connection-state recovery bounds.
import sio = require('clusterize-express/socket.io')
sio.createAdapter({ heartbeatInterval: 500, recovery: { maxPackets: 1000, maxSessions: 5000, liveWaitMs: 2000 } })
// @ts-expect-error recovery.maxPackets is a number
sio.createAdapter({ recovery: { maxPackets: 'many' } })
sio.createAdapter({ coalesceWrites: false })
// @ts-expect-error coalesceWrites is a boolean
sio.createAdapter({ coalesceWrites: 'yes' })

// probes: token guards /stats and /metrics unless guardStats is false; stream limits.
cz.clusterize(() => require('express')(), { probes: { port: 9090, host: '0.0.0.0', token: 'x'.repeat(32), guardStats: false, maxStreams: 16, maxStreamsPerPeer: 4, maxConnections: 'auto', streamBufferBytes: 256 * 1024, streamsPerMinute: 30 } })
// @ts-expect-error guardStats is a boolean
cz.clusterize(() => require('express')(), { probes: { port: 9090, guardStats: 'yes' } })
cz.clusterize(() => require('express')(), { reload: { signal: 'SIGHUP' } })
// @ts-expect-error a reload cannot be bound to SIGKILL
cz.clusterize(() => require('express')(), { reload: { signal: 'SIGKILL' } })
cz.clusterize(() => require('express')(), { upgrade: { signal: false, timeoutMs: 120000 } })
// @ts-expect-error the upgrade signal is SIGURG (reload's signals are taken)
cz.clusterize(() => require('express')(), { upgrade: { signal: 'SIGUSR2' } })
sio.createAdapter({ strict: true })
// @ts-expect-error strict is a boolean
sio.createAdapter({ strict: 1 })

// clusterize-express/rate-limit: a store for express-rate-limit, used as its own stores are.
import rl = require('clusterize-express/rate-limit')
import erl = require('express-rate-limit')
erl.rateLimit({ windowMs: 60000, limit: 10, store: new rl.ClusterStore() })
erl.rateLimit({ store: new rl.ClusterStore({ prefix: 'login:', timeoutMs: 500 }), passOnStoreError: true })
// @ts-expect-error timeoutMs is a number
new rl.ClusterStore({ timeoutMs: '1s' })
cz.clusterize(() => require('express')(), { defaultRateLimitStore: 'cluster' })
// @ts-expect-error defaultRateLimitStore is 'memory' or 'cluster'
cz.clusterize(() => require('express')(), { defaultRateLimitStore: 'redis' })

// singleton(): start gets an AbortSignal and a numeric fencing token; the handle stops it.
const job = cz.singleton('poller', (signal: AbortSignal, token: number) => {
  const timer = setInterval(() => token.toFixed(0), 200)
  signal.addEventListener('abort', () => clearInterval(timer))
}, { leaseMs: 2000 })
const stopped: Promise<void> = job.stop()
const held: number | null = job.token
void stopped
void held
// @ts-expect-error leaseMs is a number
cz.singleton('poller', () => {}, { leaseMs: 'long' })
