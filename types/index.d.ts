// Type definitions for clusterize-express
// Hand-written; compiled against test/types/*.ts by `npm test`.

/// <reference types="node" />

import { EventEmitter } from 'node:events'
import type { Server } from 'node:http'
import type { RequestHandler } from 'express'
import type { SessionOptions, Store } from 'express-session'
import type { Redis, Cluster, RedisOptions, ClusterOptions, ClusterNode } from 'ioredis'

// ---- redis -----------------------------------------------------------------

/** A Sentinel-managed primary: ioredis options with the sentinels and the name they monitor. */
export interface RedisSentinelTarget extends RedisOptions {
  sentinels: Array<{ host?: string, port?: number }>
  /** The name the sentinels monitor (`sentinel monitor <name> ...`). */
  name: string
}

/** A Redis Cluster: its startup nodes, plus any ioredis ClusterOptions. */
export interface RedisClusterTarget extends ClusterOptions {
  nodes: ClusterNode[]
}

/**
 * Where Redis is, for session({ redis }) and bus.redis:
 * - a URL: `redis://[[user]:password@]host[:port][/db]` (`rediss://` for TLS),
 *   `redis+sentinel://[[user]:password@]host:26379[,host:26379...]/name[/db][?sentinelPassword=...]`,
 *   `redis+cluster://[[user]:password@]host:port[,host:port...]` (`rediss+` for TLS);
 * - ioredis options for one node, or with `sentinels` and `name` for Sentinel;
 * - a list of cluster nodes, or `{ nodes, ...ClusterOptions }`;
 * - an ioredis Redis or Cluster client (used as is, not closed by us).
 * Checked at startup: a malformed target fails naming the option, and so does a node-redis client
 * (package `redis`) or any other object that is not plain options (pass its URL instead).
 */
export type RedisTarget = string | RedisOptions | RedisSentinelTarget | RedisClusterTarget | ClusterNode[] | Redis | Cluster

// ---- clusterize ------------------------------------------------------------

/** Anything createApp may give: an Express app, a (req, res) listener or an http.Server. */
export type AppLike =
  | ((req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, next?: (err?: unknown) => void) => unknown)
  | Server

/** A factory (sync or async) returning an app, or a module path whose export is one. */
export type CreateApp = (() => AppLike | Promise<AppLike>) | string

/**
 * How new connections reach workers. 'balanced': workers accept from the shared socket themselves
 * (no hand-off through the primary) and each stops accepting while it holds more than its share of
 * the open connections or its event loop is late; falls back to 'none' where Node cannot bind a
 * socket without listening on it.
 */
export type Scheduling = 'rr' | 'none' | 'reuseport' | 'sticky' | 'balanced'

export type SignalName = NodeJS.Signals

export interface HealthOptions {
  /** How often each worker reports. Default 1000. */
  heartbeatMs?: number
  /** No heartbeat for this long: the worker is hung, killed and replaced. Default 10000. */
  heartbeatTimeoutMs?: number
  /** Recycle a worker whose RSS passes this (MB); 0 = off. Default 0. */
  maxMemoryMB?: number
  /**
   * Recycle a worker whose heap used passes this fraction of what V8's old generation may hold
   * (heap_size_limit minus the young generation's reserve), or grows fast enough to pass it within
   * three heartbeats. During a reload, a new worker that trips it rolls the reload back. Default 0.9.
   */
  maxHeapRatio?: number
  /** Skip a worker for new connections while its event-loop delay p99 is above this ('rr'); 0 = off. Default 500. */
  maxEventLoopDelayMs?: number
}

export interface RestartOptions {
  /** First restart delay after consecutive failures. Default 100. */
  backoffInitialMs?: number
  /** Restart delay cap. Default 10000. */
  backoffMaxMs?: number
  /** Failed starts (boot failures, not ready in time, failures sooner than stableAfterMs after ready) within crashWindowMs that open the crash-loop breaker. Default 5. */
  maxCrashes?: number
  /** Default 60000. */
  crashWindowMs?: number
  /**
   * A worker ready this long has shown its code stays up: if it then crashes or hangs, that is a
   * request-level fault (restarted at once, never counted by the breaker), and a worker of the
   * tripped code that stays up this long closes the breaker. Default 5000.
   */
  stableAfterMs?: number
}

/** The signals a reload may be bound to (others cannot be caught, or end a process that does not handle them). */
export type ReloadSignal = 'SIGUSR2' | 'SIGHUP' | 'SIGUSR1'

export interface ReloadOptions {
  /** Signal that starts a rolling reload; false to disable. Default 'SIGUSR2'. */
  signal?: ReloadSignal | false
  /** A new worker must listen, report ready and send a heartbeat within this. Default 30000. */
  readyTimeoutMs?: number
  /** An old worker is killed if still draining after this. Default 30000. */
  drainTimeoutMs?: number
  /**
   * The canary must stay healthy (up, heartbeating, under the memory guard) this long after it is ready,
   * serving beside its predecessor, before the other slots are replaced; the whole new generation then
   * serves this long again before the old workers drain. A failure of any new worker until then rolls
   * every replaced slot back. 0 = off (old workers drain at once; a failure only stops the rollout). Default 5000.
   */
  bakeMs?: number
  /**
   * A new-generation worker silent this long during a reload (canary bake included) fails it, and the
   * reload rolls back. Default: three heartbeats, at least 3000, at most health.heartbeatTimeoutMs.
   */
  heartbeatTimeoutMs?: number
  /** Workers replaced at a time after the canary. Default 1. */
  batch?: number
  /**
   * A cron expression (5 fields, or 6 with seconds first; names and @daily-style macros; local time):
   * a rolling reload at each fire, PM2's cron_restart. Default null (none).
   */
  cron?: string | null
}

/** Reload when files change (development). node_modules and .git are never watched. */
export interface WatchOptions {
  /** Files or directories (watched recursively), relative to the working directory. Default: the app's directory. */
  paths?: string[]
  /** More to leave out: a name ('dist'), a path relative to a watched directory ('logs/app'), or a glob ('*.log'). */
  ignore?: string[]
  /** Changes are collected until none came for this long, then one reload starts. Default 500. */
  debounceMs?: number
}

/** The signal that starts a primary upgrade: SIGURG (ignored by default, used by neither Node nor a terminal). */
export type UpgradeSignal = 'SIGURG'

export interface UpgradeOptions {
  /** Signal that replaces the primary with a new one started from what is on disk; false to disable. Default 'SIGURG'. */
  signal?: UpgradeSignal | false
  /** The new primary must have every worker ready and take over within this, or it is killed and the old one keeps serving. Default 60000. */
  timeoutMs?: number
}

export interface ShutdownOptions {
  /** Workers still draining after this are killed and the exit code is 1. Default 25000. */
  timeoutMs?: number
  /** Default ['SIGTERM', 'SIGINT']. A second signal forces exit. */
  signals?: SignalName[]
}

export interface ProbesOptions {
  port: number
  /** Default '127.0.0.1'. */
  host?: string
  /** The live page at /dashboard (Server-Sent Events at /dashboard/events). Default: on for a loopback host or with a token, off otherwise. */
  dashboard?: boolean
  /** Required to view the dashboard on a non-loopback host: `Authorization: Bearer <token>` or `?token=`. At least 16 characters. */
  token?: string
  /** Enables POST /control/reload (and the page's Reload button); sent in the X-Clusterize-Token header, never a cookie. At least 16 characters. */
  controlToken?: string
  /** With `token` set, /stats and /metrics need it too (`Authorization: Bearer <token>`, as Prometheus sends it). Default: true when `token` is set; true without a token fails at startup. /live and /ready never need it. */
  guardStats?: boolean
  /** Dashboard event streams open at once; more get 503 with Retry-After. Default 64. */
  maxStreams?: number
  /**
   * Probes connections open at once; beyond it idle ones are closed first (never-requested, then
   * kept-alive), then newcomers refused. Default 'auto': maxStreams + 64, at most an eighth of the
   * primary's open-file limit (at least 16).
   */
  maxConnections?: number | 'auto'
  /** Dashboard event streams open at once from one peer address, checked before `maxStreams` so one peer cannot take every slot; more get 429. Default 8. */
  maxStreamsPerPeer?: number
  /** A stream whose client has not taken this many bytes is closed (a client that stopped reading). Default 1048576 (1 MiB), at least 1024. */
  streamBufferBytes?: number
  /** New dashboard event streams per peer address per minute; more get 429. Default 60. */
  streamsPerMinute?: number
}

/**
 * A request whose body has averaged less than `minBytesPerSecond` since its head arrived, once
 * `graceMs` has passed, gets 408 and is closed. Time the app is not reading the body does not
 * count. At most half of maxIdleConnections such requests are held per worker; past it the
 * oldest below the rate are closed at once.
 */
export interface SlowBodyOptions {
  /** Default 240 (bytes a second); 0 turns the check off (Node's requestTimeout still applies). */
  minBytesPerSecond?: number
  /** Default 5000. */
  graceMs?: number
}

/** The app's prom-client metrics, aggregated across workers on the probes server's /metrics. */
export interface MetricsOptions {
  /**
   * The prom-client registries (each worker's own) to aggregate, or a function returning them
   * (called on each report: registries the app builds while it loads). Default: the default
   * registry of every prom-client copy the app loaded.
   */
  registries?: Array<{ getMetricsAsJSON(): Promise<unknown[]> | unknown[] }> | (() => Array<{ getMetricsAsJSON(): Promise<unknown[]> | unknown[] }>)
  /** How long a scrape waits for a worker's fresh values; one that does not answer counts with its last report and is named in `clusterize_app_metrics_missing`. Default 1000. */
  timeoutMs?: number
  /** How often each worker with metrics reports them: what a worker that crashes can lose. Default 1000, at least 50. */
  pushIntervalMs?: number
}

/** pino, console and winston fit. */
export interface Logger {
  info(...args: any[]): unknown
  warn(...args: any[]): unknown
  error(...args: any[]): unknown
  debug?(...args: any[]): unknown
}

/** Dynamic workers: the count follows the workers' event-loop utilization between min and max. */
export interface DynamicWorkersOptions {
  /** Never fewer (the count at start). Default 1. */
  min?: number
  /** Never more; 'auto': the CPUs this process may use (the CPU quota, followed live). Default 'auto'. */
  max?: number | 'auto'
  /** Add a worker once the mean event-loop utilization stayed at or above this for upAfterMs. Default 0.75. */
  upElu?: number
  /** Retire a worker once it stayed at or below this for downAfterMs. Default 0.25. */
  downElu?: number
  /** Default 10000. */
  upAfterMs?: number
  /** Default 60000. */
  downAfterMs?: number
}

export interface ClusterizeOptions {
  /** Default PORT or 3000. 0 picks a free port. */
  port?: number | string
  host?: string
  /**
   * Default WORKERS or 'auto' (cgroup-aware CPU count, followed live as the CPU quota changes).
   * 0 = single-process mode. `{ min, max }`: dynamic workers, added and retired with the load.
   */
  workers?: number | 'auto' | DynamicWorkersOptions
  /**
   * Warm spares: extra workers that load the app and wait, taking no traffic, so a crashed
   * worker's slot is served again at once. Each costs one idle worker's memory. Default 0.
   */
  spare?: number
  /**
   * With scheduling 'sticky': `sid: true` routes engine.io (socket.io) long polling by session id
   * (the primary reads the request line; plain HTTP only, TLS ended in front). Default false.
   */
  sticky?: { sid?: boolean }
  /**
   * 'cluster': the store express-session creates when the app gives none (its MemoryStore) becomes
   * the cluster store, so an unchanged app's sessions work across workers. 'redis': it becomes the
   * Redis store (bus.redis, else REDIS_URL; one is required), so they also survive a restart of the
   * primary and carry across hosts. Default 'memory'.
   */
  defaultSessionStore?: 'memory' | 'cluster' | 'redis'
  /**
   * 'cluster': each MemoryStore express-rate-limit builds (rateLimit() without `store`) counts in the
   * cluster instead (a ClusterStore, prefix `rl:<n>:` by construction order), so a limit holds for all
   * workers with no code change. Default 'memory' (with several workers: one warning).
   */
  defaultRateLimitStore?: 'memory' | 'cluster'
  /**
   * Not given: 'balanced' on Linux with Node >= 22.12 (workers accept, spread by open connections),
   * else 'rr' (load-aware round robin in the primary), with the reason logged. stats().scheduling names the mode in use.
   */
  scheduling?: Scheduling
  health?: HealthOptions
  restart?: RestartOptions
  reload?: ReloadOptions
  /** Reload on file change, for development (PM2's watch): true watches the app's directory. Default off. */
  watch?: boolean | string[] | WatchOptions | null
  /** `clusterize upgrade`, handle.upgrade() and the upgrade signal (primary only). */
  upgrade?: UpgradeOptions
  shutdown?: ShutdownOptions
  /** /live, /ready, /stats, /metrics served by the primary. Off by default. */
  probes?: ProbesOptions | null | false
  bus?: BusOptions
  /** The app's prom-client metrics on /metrics, summed across workers and kept across worker exits. false: clusterize's own metrics only. */
  metrics?: MetricsOptions | false
  /** The bounds the primary enforces on the cluster session store (validated at startup). */
  clusterStore?: ClusterStoreOptions
  /** The bounds of socket.io connection-state recovery's state in the primary (validated at startup). */
  recovery?: import('./socket.io').ClusterizeRecoveryOptions
  /** Default: one readable line per lifecycle event on stderr. false = silent. */
  logger?: Logger | false
  /**
   * Print the startup banner (workers, port, probes, sessions, bus) when no `logger` is given.
   * Default true.
   */
  banner?: boolean
  /**
   * Default 65000 (longer than load balancers' 60 s idle timeout). A keepAliveTimeout the app set
   * on its own http.Server stays unless this option is given.
   */
  keepAliveTimeout?: number
  /** Default 66000. A headersTimeout the app set on its own http.Server stays unless this option is given. */
  headersTimeout?: number
  /**
   * Per process: idle connections (no request in flight) kept at most; beyond it those that never
   * sent a request are closed first (oldest first), then the kept-alive one idle the longest. With
   * sticky.sid, also the connections the primary holds for their request line. Default 'auto':
   * half the open-file soft limit (1024 where it cannot be read).
   */
  maxIdleConnections?: number | 'auto'
  /** Requests whose body arrives too slowly (a slow-POST flood): see SlowBodyOptions. */
  slowBody?: SlowBodyOptions
  /**
   * V8's largest semi-space for each worker, in MB (`--max-semi-space-size`): shorter
   * young-generation GC pauses than Node 24's default of 64 MB. Default 16 (Node 20 and 22's
   * default); 0 leaves V8's. A `--max-semi-space-size` the app gives node itself (command line or
   * NODE_OPTIONS) wins.
   */
  maxSemiSpaceMB?: number
}

export interface WorkerInfo {
  id: number
  pid: number
  generation: number
  state: 'starting' | 'ready' | 'draining' | 'stopping' | 'exited'
}

export type ExitReason =
  | 'crash' | 'boot-failure' | 'hang' | 'memory' | 'reload' | 'reload-failed'
  | 'recycle-failed' | 'shutdown'

export interface WorkerExitEvent {
  id: number
  pid: number
  code: number | null
  signal: NodeJS.Signals | null
  reason: ExitReason
  generation: number
}

export interface CrashLoopEvent {
  reason: ExitReason
  crashes: number
  windowMs: number
  lastError: string | null
  workersLeft: number
}

/** 'reload:start': a reload begins (signal, handle.reload(), CLI, dashboard); `generation` is the code generation it loads. */
export interface ReloadStartEvent {
  generation: number
}

/** 'bridge:up': the bus's Redis bridge (bus.redis) is connected and subscribed. */
export interface BridgeUpEvent {
  connected: true
  channel: string
}

/** 'bridge:down': the bus's Redis bridge lost (or could not make) a connection; it keeps reconnecting. */
export interface BridgeDownEvent {
  connected: false
  /** 'publisher: ...' or 'subscriber: ...', without credentials. */
  lastError: string
}

/** 'session:down': a worker's session store stopped answering (its session requests get 503). */
export interface SessionDownEvent {
  /** The worker's slot id. */
  id: number
  pid: number
  store: string
  lastError: string | null
}

/** 'session:up': that worker's session store answers again. */
export interface SessionUpEvent {
  id: number
  pid: number
  store: string
}

export interface ReloadResult {
  ok: boolean
  rolledBack: boolean
  reason: string | null
  replaced: number
  durationMs: number
  generation: number
}

/** handle.scale() and the 'scale:done' event. */
export interface ScaleResult {
  /** The new workers are ready, or the retired ones drained in time. */
  ok: boolean
  from: number
  to: number
  /** Workers ready when it finished. */
  ready: number
  reason: string | null
  durationMs: number
  /** What asked: 'requested' (scale()), 'load' (dynamic workers), 'cpu quota' (the quota changed), 'workers.min'. */
  why?: string
}

/** 'scale:start' */
export interface ScaleStartEvent {
  from: number
  to: number
  why: string
}

/** stats().scaling: how many worker slots there are, and what sets the count. */
export interface ScalingStats {
  /** 'fixed', 'auto' (follows the CPU quota), 'pinned' ('auto' scaled by hand), 'dynamic'. */
  mode: 'fixed' | 'auto' | 'pinned' | 'dynamic'
  workers: number
  cpus?: number
  min?: number
  /** The most dynamic workers may run now (workers.max, never above the CPU quota). */
  max?: number
  lastDecision?: { at: number, from: number, to: number, reason: string } | null
}

export interface Heartbeat {
  rss: number
  heapUsed: number
  heapLimit: number
  /** What the old generation may hold before V8 aborts (heapLimit minus the young generation's reserve). */
  heapOldLimit: number
  eventLoopDelayP99Ms: number
  eventLoopDelayMaxMs: number
  eventLoopUtilization: number
  inFlight: number
  served: number
  connections: number
  /** Connections with no request in flight. */
  idleConnections: number
  /** Idle connections closed because more than maxIdleConnections were idle, since the worker started. */
  idleShed: number
  /** Requests closed because their body arrived slower than slowBody.minBytesPerSecond, since the worker started. */
  slowBodyShed?: number
  /** The worker is out of file descriptors (EMFILE/ENFILE); rss is then the last one read. */
  fdExhausted: boolean
  /** Open upgraded connections (WebSockets). */
  webSockets: number
  poolQueue: number
  poolBusy: number
  /** Log lines this worker could not write (its stdout/stderr reader went away or stalled), since it started. */
  logDropped?: number
  generation?: number
}

export interface WorkerStats {
  id: number
  pid: number
  generation: number
  state: WorkerInfo['state']
  uptimeMs: number
  restarts: number
  /** Skipped by load-aware round robin for new connections. */
  overloaded?: boolean
  /** Connections the primary handed to this worker ('rr' and 'sticky'). */
  connectionsHanded?: number
  /**
   * With scheduling 'balanced': the worker's open connections as it last reported them, whether it
   * accepts new ones, and the most it may hold (the limit last sent to it; -1 before the first).
   */
  balance?: { open: number, accepting: boolean, limit: number }
  heartbeatAgeMs?: number | null
  heartbeat: Heartbeat | null
  session?: unknown
}

export interface ClusterStats {
  pid: number
  port: number
  scheduling: Scheduling | 'single-process'
  generation: number
  ready: boolean
  live: boolean
  /** The crash-loop breaker is open: /ready answers 503 and empty slots are retried at restart.backoffMaxMs. */
  crashLooping: boolean
  shuttingDown: boolean
  reloads: number
  /** Worker failures since the start, by kind (absent in single-process mode). */
  failures?: WorkerFailureCounts
  /** Slots with no worker because their last fork failed (absent in single-process mode). */
  cannotFork?: number[]
  scaling?: ScalingStats
  workers: WorkerStats[]
  bus?: unknown
  /** What the cluster session store in the primary holds (null in single-process mode before any use). */
  sessions?: ClusterSessionStats | null
  /** The `singleton()` jobs this host holds or waits for. */
  singletons?: SingletonStats[]
  /** Connections the primary holds itself ('rr' and 'sticky' only). */
  connections?: PrimaryConnectionStats
  /** The dashboard's event streams (when `probes.dashboard` is on). */
  dashboard?: DashboardStreamStats
  /** The probes server's connections: open now, idle ones closed to make room, newcomers refused, requests refused for a body (413). */
  probes?: { open: number, shed: number, refused: number, bodyRefused: number }
  /** The primary's own log output: lines dropped (its stdout/stderr or `--json` reader went away or stalled) and stream errors seen. */
  output?: { dropped: number, failures: number }
  /** What the bounds of the stores the primary holds evicted or refused since it started. */
  bounds?: PrimaryBoundStats
}

export interface WorkerFailureCounts {
  /** Crashes and hangs of workers that had been up restart.stableAfterMs: restarted at once, never counted by the breaker. */
  request: number
  /** Boot failures, workers not ready within reload.readyTimeoutMs, and earlier crashes or hangs: what the breaker counts. */
  start: number
  /** Processes that could not be spawned (EMFILE, EAGAIN...). */
  fork: number
}

export interface PrimaryBoundStats {
  /** Sessions evicted for `clusterStore.maxSessions` / `maxTotalBytes`. */
  sessionsEvicted: number
  /** Hits of new rate-limit clients refused because the primary's counters were full (500,000 clients). */
  rateLimitKeysRefused: number
  /** socket.io recovery sessions dropped for `recovery.maxSessions`. */
  recoverySessionsDropped: number
  /** socket.io broadcasts numbered while Redis was away that were not sent to the other hosts: more than `recovery.maxPackets` waited. */
  recoveryUnsentDropped: number
}

export interface PrimaryConnectionStats {
  /** Waiting for a ready worker (boot, the only worker restarting). */
  pending: number
  /** Refused since the start because `maxIdleConnections` (at most 1024) already waited for a ready worker. */
  pendingShed: number
  /** With `sticky: { sid: true }`: still sending their request line. */
  awaiting: number
  /** With `sticky: { sid: true }`: the oldest silent ones closed beyond `maxIdleConnections`, since the start. */
  awaitingShed: number
  /** Handed to a worker that has not taken them yet. */
  handoff: number
  /** Refused since the start because their worker already had its share of `maxIdleConnections` (at most 1024) on its way to it. */
  handoffShed: number
}

export interface DashboardStreamStats {
  /** Open event streams. */
  open: number
  /** Streams closed because their client stopped reading (`probes.streamBufferBytes`). */
  evicted: number
  /** New streams refused: past `probes.maxStreamsPerPeer` or `probes.streamsPerMinute` from one peer, or `probes.maxStreams`. */
  refused: number
  /** `/dashboard/history` requests refused: past `probes.streamsPerMinute` from one peer. */
  historyRefused: number
}

export interface SingletonStats {
  name: string
  /**
   * 'held': a worker of this host runs it; 'stopping': its lease was lost and the holder has not
   * stopped yet (nobody else starts meanwhile); 'held-elsewhere': another host of the fleet holds it
   * (Redis); 'waiting': asked for, not yet granted.
   */
  state: 'held' | 'stopping' | 'held-elsewhere' | 'waiting'
  /** The worker that runs it (slot as in `workers`, null when its record is gone), or null. */
  worker: { slot: number | null, pid: number } | null
  /** The holder's fencing token (grows with each new holder), or null. */
  token: number | null
  /** When the holder got it (ISO 8601), or null. */
  since: string | null
  heldMs: number | null
  /** 'local': this primary decides alone; 'redis': the lease is claimed in Redis for the fleet. */
  lease: 'local' | 'redis'
  /** Workers of this host waiting to take over. */
  waiting: number
}

export interface ClusterSessionStats {
  sessions: number
  /** UTF-8 bytes of session JSON held. */
  bytes: number
  maxSessions: number
  maxTotalBytes: number
  /** Sessions evicted by maxSessions / maxTotalBytes since the start. */
  evicted: number
  /** The workers' read leases (clusterStore.leaseMs); null when they are off or no worker runs (`workers: 0`). */
  leases: ClusterSessionLeaseStats | null
}

export interface ClusterSessionLeaseStats {
  /** clusterStore.leaseMs. */
  leaseMs: number
  /** Leases granted (and renewed) since the start. */
  granted: number
  /** Leases revoked before another worker's write, a destroy, a touch or a clear. */
  revoked: number
  /** Leases that ran out on sessions nobody used since, revoked in the background so their records can go. */
  released: number
  /**
   * Revocations waiting for their holder's answer now. A lease ends only on that answer or on the
   * holder's exit, never on time alone: a hung holder keeps one waiting until the hang detector kills it.
   */
  revoking: number
}

export interface ReadyInfo {
  port: number
  probesPort?: number
  workers: WorkerInfo[]
}

/** What handle.upgrade() (and `clusterize upgrade`) may change about the new primary. */
export interface UpgradeRequest {
  /** The node binary the new primary runs. Default process.execPath (read anew: a binary replaced on disk is the new one). */
  node?: string
  /** Arguments appended to the old primary's (for the CLI: start flags such as ['--workers', '4']). */
  args?: string[]
}

/** 'upgrade:start': a new primary is being started. */
export interface UpgradeStartEvent {
  node: string
}

/** handle.upgrade()'s result, also the 'upgrade:done' event. */
export interface UpgradeResult {
  ok: boolean
  /** Why the old primary keeps serving (ok false). */
  reason?: string
  /** The primary serving now: the new one, or this one when the upgrade failed. */
  pid: number
  previousPid: number
  /** The new primary's process.version. */
  node?: string
  generation?: number
  durationMs: number
}

export interface ShutdownResult {
  /** 0 when every worker drained in time, 1 when some were killed at the deadline. */
  code: number
  forced: boolean
}

/** Returned by clusterize() in the primary and in single-process mode. */
export interface PrimaryHandle extends EventEmitter {
  readonly ready: Promise<ReadyInfo>
  reload(): Promise<ReloadResult>
  /**
   * Add or retire workers live: resolves once the new ones are ready, or the retired ones
   * (the highest slots) drained as a reload's old workers do. Absent in single-process mode.
   */
  scale?(count: number): Promise<ScaleResult>
  /**
   * Replace this primary with a new one started from what is on disk now: it inherits the
   * listening sockets and the cluster store's sessions; this one then drains and exits.
   * Absent in single-process mode (workers: 0).
   */
  upgrade?(request?: UpgradeRequest): Promise<UpgradeResult>
  shutdown(): Promise<ShutdownResult>
  stats(): ClusterStats
  address(): { port: number, host?: string }
  readonly bus: Bus
  on(event: 'worker:ready', listener: (worker: WorkerInfo) => void): this
  on(event: 'worker:exit', listener: (event: WorkerExitEvent) => void): this
  on(event: 'reload:start', listener: (event: ReloadStartEvent) => void): this
  on(event: 'reload:done', listener: (result: ReloadResult) => void): this
  on(event: 'scale:start', listener: (event: ScaleStartEvent) => void): this
  on(event: 'scale:done', listener: (result: ScaleResult) => void): this
  on(event: 'upgrade:start', listener: (event: UpgradeStartEvent) => void): this
  on(event: 'upgrade:done', listener: (result: UpgradeResult) => void): this
  on(event: 'crashloop', listener: (info: CrashLoopEvent) => void): this
  on(event: 'bridge:up', listener: (state: BridgeUpEvent) => void): this
  on(event: 'bridge:down', listener: (state: BridgeDownEvent) => void): this
  on(event: 'session:down', listener: (event: SessionDownEvent) => void): this
  on(event: 'session:up', listener: (event: SessionUpEvent) => void): this
  on(event: 'shutdown', listener: () => void): this
  on(event: string | symbol, listener: (...args: any[]) => void): this
  once(event: 'worker:ready', listener: (worker: WorkerInfo) => void): this
  once(event: 'worker:exit', listener: (event: WorkerExitEvent) => void): this
  once(event: 'reload:start', listener: (event: ReloadStartEvent) => void): this
  once(event: 'reload:done', listener: (result: ReloadResult) => void): this
  once(event: 'scale:start', listener: (event: ScaleStartEvent) => void): this
  once(event: 'scale:done', listener: (result: ScaleResult) => void): this
  once(event: 'upgrade:start', listener: (event: UpgradeStartEvent) => void): this
  once(event: 'upgrade:done', listener: (result: UpgradeResult) => void): this
  once(event: 'crashloop', listener: (info: CrashLoopEvent) => void): this
  once(event: 'bridge:up', listener: (state: BridgeUpEvent) => void): this
  once(event: 'bridge:down', listener: (state: BridgeDownEvent) => void): this
  once(event: 'session:down', listener: (event: SessionDownEvent) => void): this
  once(event: 'session:up', listener: (event: SessionUpEvent) => void): this
  once(event: 'shutdown', listener: () => void): this
  once(event: string | symbol, listener: (...args: any[]) => void): this
  /** Single-process mode only. */
  readonly app?: AppLike | null
  readonly server?: Server | null
}

/** Returned by clusterize() inside a worker. */
export interface WorkerHandle {
  app: AppLike | null
  server: Server | null
  /** Stable slot id 0..N-1 (also env CLUSTERIZE_WORKER_ID). */
  id: number
  generation: number
  ready: Promise<{ id: number, generation: number, address: unknown }>
}

/**
 * Run an Express app on every core. In the primary returns the primary handle,
 * in a worker the worker handle: tell them apart with isPrimary(handle).
 */
export declare function clusterize(createApp: CreateApp, options?: ClusterizeOptions): PrimaryHandle | WorkerHandle

/**
 * Whether clusterize() returned the primary's handle (in the primary, or with `workers: 0`),
 * not a worker's: `if (isPrimary(handle)) await handle.reload()` needs no cast.
 */
export declare function isPrimary(handle: PrimaryHandle | WorkerHandle): handle is PrimaryHandle

export interface DrainInfo {
  /** Why this process drains: 'reload', 'memory', 'shutdown' or 'primary-gone'. */
  reason: string
  /** Date.now() value by which the drain must be over. */
  deadline: number
}

/**
 * Run `fn` when this worker (or single process) starts draining, before the default close of
 * WebSockets (1012 on reload/recycle, 1001 on shutdown) and kept-alive connections. The drain
 * waits for its promise until the deadline. Returns a function that removes the hook.
 */
export declare function onDrain(fn: (info: DrainInfo) => void | Promise<void>): () => void

/** Why a singleton's signal aborted: `(signal.reason as SingletonAbortError).reason`. */
export type SingletonAbortReason = 'drain' | 'lease-lost' | 'stopped' | 'failed'

export interface SingletonOptions {
  /**
   * With bus.redis: how long a host keeps the name without renewing it (ms, 100..3600000). Another
   * host takes over within about 1.25 x leaseMs of a host's loss; a holder must stop within
   * leaseMs / 3 of its signal aborting. Default 5000.
   */
  leaseMs?: number
  /** Where the job's warnings and errors go (default: debug('clusterize:singleton')). */
  logger?: Logger
}

export interface SingletonHandle {
  readonly name: string
  /** Whether this process runs the job now. */
  readonly running: boolean
  /** This process's fencing token while it runs the job, else null. */
  readonly token: number | null
  /** Stop for good in this process (another worker takes over); resolves once the run here ended. */
  stop(): Promise<void>
}

/**
 * Run `start` on exactly one worker of the cluster (one per fleet with bus.redis). Every worker calls
 * it once with the same name. `signal` aborts when this worker drains, loses the lease or stop() is
 * called; the lease is handed on only after the abort and after start()'s promise settled, so two
 * runs never overlap. `token` grows with each new holder (fencing).
 */
export declare function singleton(
  name: string,
  start: (signal: AbortSignal, token: number) => void | Promise<void>,
  options?: SingletonOptions
): SingletonHandle

/**
 * The base class of every error clusterize-express creates; `code` is one of the codes in
 * docs/errors.md (ERR_CLUSTERIZE_<AREA>_<WHAT>).
 */
export declare class ClusterizeError extends Error {
  constructor(message: string, code: string, fields?: { cause?: unknown, [key: string]: unknown })
  readonly code: string
}

/** An option (or environment fallback) is unknown, of the wrong type or out of range: thrown at startup. */
export declare class ClusterizeOptionError extends ClusterizeError {
  constructor(message: string, option?: string)
  /** 'ERR_CLUSTERIZE_CONFIG_OPTION'; subclasses have their own ('ERR_CLUSTERIZE_OFFLOAD_OPTION'). */
  readonly code: 'ERR_CLUSTERIZE_CONFIG_OPTION' | 'ERR_CLUSTERIZE_OFFLOAD_OPTION'
  /** The option that was wrong, e.g. 'reload.batch'. */
  readonly option: string
}

/** A bus request or gather got no answer within its timeoutMs. */
export declare class ClusterizeTimeoutError extends ClusterizeError {
  constructor(message: string)
  readonly code: 'ERR_CLUSTERIZE_BUS_TIMEOUT'
}

/** The app cannot be loaded or built: handle.ready rejects at the first failure. */
export declare class ClusterizeAppError extends ClusterizeError {
  constructor(message: string)
  readonly code: 'ERR_CLUSTERIZE_APP_INVALID'
}

/** A usage mistake on the `clusterize` command line (exit code 2). */
export declare class CliUsageError extends ClusterizeError {
  constructor(message: string)
  readonly code: 'ERR_CLUSTERIZE_CLI_USAGE'
  readonly exitCode: 2
}

/** A `clusterize` command that failed: no running primary, no answer (exit code 1). */
export declare class CliRuntimeError extends ClusterizeError {
  constructor(message: string)
  readonly code: 'ERR_CLUSTERIZE_CLI_FAILED'
  readonly exitCode: 1
}

// ---- bus -------------------------------------------------------------------

export interface BusMeta {
  /** The topic the message was sent on. */
  topic: string
  /** The sender: a worker slot id, or 'primary'. */
  from: number | 'primary'
  /** The sender's reload generation; null when the sender is a primary. */
  generation: number | null
  /** Only on messages bridged over Redis: the sending host (hostname:pid of its primary). */
  host?: string
}

export type BusListener<T = any> = (data: T, meta: BusMeta) => void | Promise<void>
export type BusHandler<T = any, R = any> = (data: T, meta: BusMeta) => R | Promise<R>

export type GatherEntry<R = any> =
  | { workerId: number; pid: number; result: R; error?: undefined }
  | { workerId: number; pid: number; error: Error & { code?: string | number; remote?: boolean }; result?: undefined }

/** One entry per worker that answered or failed, sorted by workerId; `missing`: ids that did not answer in time. */
export type GatherResult<R = any> = Array<GatherEntry<R>> & { missing: number[] }

/** What bus.onDropped() handlers get. */
export interface BusDropInfo {
  /** The stuck worker's slot id. */
  workerId: number
  /** Messages of this worker dropped for it (since the last report). */
  count: number
  /** The topic of one of them. */
  topic: string
}

export interface BusRequestOptions {
  /** Default 5000. */
  timeoutMs?: number
}

export interface BusBroadcastOptions {
  /** Also deliver to the sender's own listeners (default false). */
  self?: boolean
}

export interface Bus {
  on<T = any>(topic: string, handler: BusListener<T>): Bus
  once<T = any>(topic: string, handler: BusListener<T>): Bus
  once<T = any>(topic: string): Promise<{ data: T; meta: BusMeta }>
  off(topic: string, handler?: BusListener<any>): Bus
  broadcast(topic: string, data?: unknown, options?: BusBroadcastOptions): void
  /** false when the message was certainly dropped (primary / single process only). */
  send(workerId: number | 'primary', topic: string, data?: unknown): boolean
  /** Returns a function that removes the handler. */
  handle<T = any, R = any>(topic: string, fn: BusHandler<T, R>): () => void
  request<R = any>(topic: string, data?: unknown, options?: BusRequestOptions): Promise<R>
  gather<R = any>(topic: string, data?: unknown, options?: BusRequestOptions): Promise<GatherResult<R>>
  /**
   * Resolves once what this worker has sent and some receiver has not taken yet
   * (its queue towards the primary, and its broadcasts and sends the primary
   * holds for other workers) is back under half of bus.maxQueuedBytes (or its
   * channel closed): await it after an ERR_CLUSTERIZE_BUS_BACKPRESSURE error,
   * then send again. Resolves at once in the primary and with workers: 0.
   */
  drained(): Promise<void>
  /**
   * In a worker: `handler` is called when the primary dropped messages of this
   * worker for a stuck worker (one that read nothing for bus.stallTimeoutMs).
   * Returns a function that removes the handler.
   */
  onDropped(handler: (info: BusDropInfo) => void): () => void
  /** 'none' before clusterize() starts, then 'primary' | 'worker' | 'local'. */
  readonly role: 'none' | 'primary' | 'worker' | 'local'
}

export interface ClusterStoreOptions {
  /** Sessions the primary holds at most; the oldest-expiring is evicted first. Default 100000. */
  maxSessions?: number
  /**
   * Bytes of session JSON the primary holds at most, evicting like maxSessions; a single session over
   * it is refused with 413. Default 134217728 (128 MiB).
   */
  maxTotalBytes?: number
  /**
   * How long a worker may answer reads of a session from the copy it last read or wrote, without asking
   * the primary (a read lease: one IPC round trip per request instead of two on a kept-alive connection).
   * The primary revokes a lease before another worker's write is applied, so reads never see data older
   * than a finished write; a stuck holder delays such a write by at most this long. 0 turns leases off.
   * Default 1000.
   */
  leaseMs?: number
}

export interface BusOptions {
  /** Bridges broadcasts between hosts: one Redis node, Sentinel or a Redis Cluster (see RedisTarget). */
  redis?: RedisTarget | null
  /**
   * On a Redis Cluster: 'auto' (default) uses sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis >= 7) when
   * every node supports it, so a broadcast reaches only the shard that owns the channel; false uses
   * classic PUBLISH/SUBSCRIBE. Ignored on one node or Sentinel.
   */
  shardedPubSub?: 'auto' | false
  /** Redis pub/sub channel. Default 'clusterize:bus'. */
  channel?: string
  /** Default 'json'. 'advanced' = structured clone (Map, Set, Buffer, Date, BigInt). */
  serialization?: 'json' | 'advanced'
  /** Default 1048576. */
  maxMessageBytes?: number
  /**
   * What a worker may have sent that some receiver has not taken yet (its queue towards the primary,
   * and its broadcasts and sends the primary holds for other workers); past it its send throws
   * ERR_CLUSTERIZE_BUS_BACKPRESSURE. Also what the primary holds of its own (and bridged) messages
   * per worker, and the bound on publishes Redis has not acknowledged. Default 16777216.
   */
  maxQueuedBytes?: number
  /**
   * A worker that reads none of the messages queued for it for this long (a blocked event loop) is
   * stuck: the primary drops messages to it (counted, reported to their senders through
   * bus.onDropped) until it reads again, instead of making every sender wait on it. Default 5000.
   */
  stallTimeoutMs?: number
  /**
   * With bus.redis: how many bytes of outgoing broadcasts wait while Redis is unreachable, to be
   * published in order once it is back; past it they are dropped (counted). 0 turns the buffer off.
   * Default 8388608.
   */
  outageBufferBytes?: number
}

export interface BusBridgeStatus {
  connected: boolean
  publisher: string
  subscriber: string
  /** What bus.redis points at. */
  topology: 'node' | 'sentinel' | 'cluster'
  /** 'sharded' on a Redis Cluster that supports it; null until a cluster's support is known. */
  pubsub: 'classic' | 'sharded' | null
  channel: string
  host: string
  lastError: string | null
  lastErrorAt: string | null
  published: number
  received: number
  dropped: number
  malformed: number
  /** Bytes handed to PUBLISH and not yet acknowledged by Redis (bounded by bus.maxQueuedBytes). */
  queuedBytes: number
  /** Broadcasts waiting for Redis to come back (the outage buffer). */
  buffered: number
  /** Their bytes (bounded by bus.outageBufferBytes). */
  bufferedBytes: number
  outageBufferBytes: number
  /** Subscribers of the channel (every host's bridge) when last counted: a flush after an outage waits for them (at most 5 s). */
  subscribers: number
  /** Broadcasts published from the outage buffer so far. */
  flushed: number
  /** Frames received a second time (a PUBLISH retried after it had reached Redis), dropped: each is delivered once. */
  repeated: number
}

/** Thrown by bus calls: code is one of the ERR_CLUSTERIZE_BUS_* codes. */
export declare class ClusterizeBusError extends ClusterizeError {
  constructor(message: string, code: ClusterizeBusErrorCode, fields?: { cause?: unknown, [key: string]: unknown })
  readonly code: ClusterizeBusErrorCode
  topic?: string
  size?: number
  limit?: number
  queuedBytes?: number
}

export type ClusterizeBusErrorCode =
  | 'ERR_CLUSTERIZE_BUS_TOPIC' | 'ERR_CLUSTERIZE_BUS_TOO_LARGE' | 'ERR_CLUSTERIZE_BUS_UNSERIALISABLE'
  | 'ERR_CLUSTERIZE_BUS_NOT_STARTED' | 'ERR_CLUSTERIZE_BUS_HANDLER' | 'ERR_CLUSTERIZE_BUS_HANDLER_EXISTS'
  | 'ERR_CLUSTERIZE_BUS_NO_HANDLER' | 'ERR_CLUSTERIZE_BUS_OPTION' | 'ERR_CLUSTERIZE_BUS_TARGET'
  | 'ERR_CLUSTERIZE_BUS_CLOSED' | 'ERR_CLUSTERIZE_BUS_DECODE' | 'ERR_CLUSTERIZE_BUS_BACKPRESSURE'
  | 'ERR_CLUSTERIZE_WORKER_EXIT'

export declare const bus: Bus

// ---- offload ---------------------------------------------------------------

/** A task that lives in a module; made by `offload.task(modulePath, exportName)`. */
export interface OffloadTask<Args extends unknown[] = any[], Result = any> {
  readonly modulePath: string
  readonly exportName: string
  /** @internal phantom for inference only */
  readonly __signature?: (...args: Args) => Result
}

/** What a task may be: a self-contained function (no outer variables) or a module task. */
export type OffloadTaskLike<Args extends unknown[] = any[], Result = any> =
  | ((...args: Args) => Result)
  | OffloadTask<Args, Result>

/** Result of a task as seen by the caller (promises are awaited in the thread). */
export type OffloadResult<T> = T extends OffloadTaskLike<any, infer R> ? Awaited<R> : unknown

export interface OffloadResourceLimits {
  maxOldGenerationSizeMb?: number
  maxYoungGenerationSizeMb?: number
  codeRangeSizeMb?: number
  stackSizeMb?: number
}

export interface PoolOptions {
  /** Default: max(1, floor(CPUs this process may use (cgroup quota included) / CLUSTERIZE_WORKERS)). */
  threads?: number
  /** Tasks allowed to wait for a thread. Default threads * 64; 0 = none; Infinity = unbounded. */
  maxQueue?: number
  /** Max run time from dispatch to a thread; 0 = none. Default 30000 for offload(), 0 for offload.pool(). */
  taskTimeoutMs?: number
  /** Passed to new Worker(). */
  resourceLimits?: OffloadResourceLimits
  /** Absolute path of a module each thread loads (and calls, if it exports a function) before taking tasks. */
  setup?: string
  /** Consecutive startup failures after which the pool stops respawning threads. Default 3. */
  maxStartupFailures?: number
  /** Linux: pool threads run this much nicer than the event loop (0 = off, max 19). Default 10. */
  niceness?: number
}

export interface OffloadOptions extends PoolOptions {
  /** A client that goes away removes its queued task. Default true. */
  cancelOnDisconnect?: boolean
  /** A client that goes away also stops its running task (thread replaced). Default false. */
  terminateOnDisconnect?: boolean
}

export interface ExecOptions {
  /** Queued task: removed. Running task: terminated (thread replaced) unless terminateOnAbort is false. */
  signal?: AbortSignal
  /** Overrides the pool's taskTimeoutMs for this task. */
  timeoutMs?: number
  /** Default true. */
  terminateOnAbort?: boolean
}

export interface Percentiles {
  /** milliseconds */
  p50: number
  /** milliseconds */
  p99: number
  samples: number
}

export interface PoolStats {
  threads: number
  busy: number
  idle: number
  queued: number
  maxQueue: number
  completed: number
  failed: number
  cancelled: number
  timedOut: number
  /** Tasks rejected because the queue was full. */
  rejected: number
  crashed: number
  replaced: number
  /** Enqueue to dispatch, last 1024 tasks. */
  waitTime: Percentiles
  /** Dispatch to result, last 1024 tasks. */
  runTime: Percentiles
  /** Why the pool stopped respawning threads, or null. */
  broken: string | null
  closing: boolean
}

export interface Pool {
  readonly options: Required<Omit<PoolOptions, 'resourceLimits' | 'setup'>> & Pick<PoolOptions, 'resourceLimits' | 'setup'>
  /** Tasks waiting for a thread. */
  readonly queued: number
  /** Threads running a task. */
  readonly busy: number
  /** Live threads. */
  readonly threads: number
  run<T extends OffloadTaskLike>(task: T, ...args: T extends OffloadTaskLike<infer A, any> ? A : unknown[]): Promise<OffloadResult<T>>
  exec<T extends OffloadTaskLike>(task: T, args?: T extends OffloadTaskLike<infer A, any> ? A : unknown[], options?: ExecOptions): Promise<OffloadResult<T>>
  stats(): PoolStats
  /** Drain running and queued tasks (up to timeoutMs, default 30000), then terminate the threads. */
  close(options?: { timeoutMs?: number }): Promise<{ drained: boolean }>
  /** close({ timeoutMs: 0 }) */
  destroy(): Promise<{ drained: boolean }>
}

export type OffloadRequestFn = <T extends OffloadTaskLike>(
  task: T,
  ...args: T extends OffloadTaskLike<infer A, any> ? A : unknown[]
) => Promise<OffloadResult<T>>

export interface OffloadMiddleware {
  (req: any, res: any, next: (err?: unknown) => void): void
  readonly pool: Pool
  stats(): PoolStats
  close(options?: { timeoutMs?: number }): Promise<{ drained: boolean }>
}

/** The base of the offload errors: `status`/`statusCode` is what Express answers with. */
export declare class OffloadError extends ClusterizeError {
  constructor(message: string, info?: { status?: number, code?: string, cause?: unknown })
  status: number
  statusCode: number
  /** One of the ERR_CLUSTERIZE_OFFLOAD_* codes; 'ABORT_ERR' on a TaskAbortedError; a TaskError keeps the task error's own code. */
  readonly code: string
  expose: boolean
}
export declare class QueueFullError extends OffloadError {
  retryAfter: number
  headers: { 'Retry-After': string }
}
export declare class TaskTimeoutError extends OffloadError { timeoutMs: number }
export declare class TaskAbortedError extends OffloadError { name: 'AbortError' }
export declare class TaskError extends OffloadError { taskErrorName: string }
export declare class ThreadExitError extends OffloadError { exitCode: number | null }
export declare class ThreadStartupError extends OffloadError {}
export declare class PoolClosedError extends OffloadError {}
export declare class CloneError extends OffloadError { position?: number }
export declare class OuterVariableError extends OffloadError { variable: string }
export declare class InvalidTaskError extends OffloadError {}
export declare class OffloadOptionError extends ClusterizeOptionError { readonly code: 'ERR_CLUSTERIZE_OFFLOAD_OPTION' }

export interface OffloadFunction {
  /** Express middleware installing req.offload(task, ...args). Its pool starts at once. */
  (options?: OffloadOptions): OffloadMiddleware
  /** Route handler sending task(...mapReq(req)) as JSON; errors answered as JSON { error, code }. */
  route<T extends OffloadTaskLike>(task: T, mapReq?: (req: any) => unknown): (req: any, res: any, next: (err?: unknown) => void) => void
  /** Module task descriptor; exportName defaults to 'default' (falls back to module.exports). */
  task<Args extends unknown[] = any[], Result = any>(modulePath: string | URL, exportName?: string): OffloadTask<Args, Result>
  /** Transfer instead of copy (ArrayBuffer, typed array, MessagePort). */
  transfer<T extends ArrayBuffer | ArrayBufferView | import('node:worker_threads').MessagePort>(value: T): T
  /** The same pool for use outside Express (no task timeout by default). */
  pool(options?: PoolOptions): Pool
  /** Express error handler answering offload errors as JSON; other errors go to next(err). */
  errorHandler(): (err: unknown, req: any, res: any, next: (err?: unknown) => void) => void
  errors: {
    OffloadError: typeof OffloadError
    QueueFullError: typeof QueueFullError
    TaskTimeoutError: typeof TaskTimeoutError
    TaskAbortedError: typeof TaskAbortedError
    TaskError: typeof TaskError
    ThreadExitError: typeof ThreadExitError
    ThreadStartupError: typeof ThreadStartupError
    PoolClosedError: typeof PoolClosedError
    CloneError: typeof CloneError
    OuterVariableError: typeof OuterVariableError
    InvalidTaskError: typeof InvalidTaskError
    OffloadOptionError: typeof OffloadOptionError
  }
}

export declare const offload: OffloadFunction

declare global {
  namespace Express {
    interface Request {
      /** Installed by offload(): run a task in this worker's thread pool. */
      offload: OffloadRequestFn
    }
  }
}

// ---- session ---------------------------------------------------------------

export type SessionStoreKind = 'auto' | 'redis' | 'cluster' | 'memory'

export interface ClusterizeSessionOptions extends Omit<SessionOptions, 'store' | 'secret'> {
  /** Signing secret(s); default SESSION_SECRET. Required (>= 32 chars) with NODE_ENV=production. */
  secret?: string | string[]
  /**
   * 'auto' (default): Redis when `redis` or REDIS_URL is set, else 'cluster'.
   * 'memory' is refused when more than one worker runs.
   */
  store?: SessionStoreKind | Store
  /** One Redis node, Sentinel or a Redis Cluster (see RedisTarget); a client is not closed by us. Default REDIS_URL. */
  redis?: RedisTarget
  /**
   * Redis key prefix (default 'sess:'). Cluster store: a namespace in the primary (default ''):
   * stores with different prefixes share nothing, clear()/length()/all() included.
   */
  prefix?: string
  /** Seconds a session lives when its cookie has no maxAge/expires. Default 86400. */
  ttl?: number
  /** Per-operation deadline in ms before the request gets 503. Default 2000. */
  timeoutMs?: number
  /**
   * Cluster store: most sessions the primary holds; the closest to expiry is evicted first. Default 100000.
   * @deprecated set clusterize({ clusterStore: { maxSessions } }), validated at startup; given here, it is
   * still sent to the primary when the store starts.
   */
  maxSessions?: number
  /**
   * Cluster store: most bytes of session JSON the primary holds in total; the sessions closest to
   * expiry are evicted first, like maxSessions. Default 134217728 (128 MiB).
   * @deprecated as the primary's bound: set clusterize({ clusterStore: { maxTotalBytes } }); given here,
   * it is still sent to the primary (a value lower than the primary's ends its read leases), and
   * checked in the worker before a session is sent.
   */
  maxTotalBytes?: number
  /** Cluster store: a session bigger than this as JSON is not stored and the request gets 413. Default 524288 (512 KiB). */
  maxSessionBytes?: number
  /** Retry-After seconds on a 503. Default 1. */
  retryAfter?: number
}

export interface SessionStatus {
  store: string
  available: boolean
  lastError: string | null
}

export interface SessionMiddleware extends RequestHandler {
  /** The express-session Store in use. */
  readonly store: Store
  /** 'redis' | 'cluster' | 'memory' | the class name of a store you passed. */
  readonly storeKind: string
  /** Stop using the store (quits a Redis client session() created). */
  close(): Promise<void>
}

export interface SessionFunction {
  (options?: ClusterizeSessionOptions): SessionMiddleware
  /** Status of this process's session store(s), or null when session() was never called. */
  status(): SessionStatus | null
  sessionStatus(): SessionStatus | null
}

export declare const session: SessionFunction

/** The base of the session errors a client sees: carries the HTTP status to answer with. */
export declare class SessionHttpError extends ClusterizeError {
  readonly status: number
  readonly statusCode: number
  readonly expose: boolean
}

/** Error passed to callbacks (and answered as 503) when the store cannot answer. */
export declare class SessionStoreUnavailableError extends SessionHttpError {
  readonly code: 'ERR_CLUSTERIZE_SESSION_STORE_UNAVAILABLE'
  readonly status: 503
  readonly statusCode: 503
  readonly expose: true
  readonly store?: string
}

/** Error passed to callbacks (and answered as 413) when a session is over maxSessionBytes / maxTotalBytes. */
export declare class SessionTooLargeError extends SessionHttpError {
  readonly code: 'ERR_CLUSTERIZE_SESSION_TOO_LARGE'
  readonly status: 413
  readonly statusCode: 413
  readonly expose: true
  /** Bytes of the session as JSON. */
  readonly size?: number
  readonly limit?: number
  /** The option that sets the limit. */
  readonly option?: string
}
