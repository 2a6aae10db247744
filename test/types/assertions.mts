// Type assertions on the public declarations: events, options and the error catalogue.
import {
  clusterize, bus, onDrain,
  ClusterizeError, ClusterizeOptionError, ClusterizeTimeoutError, ClusterizeAppError, ClusterizeBusError,
  OffloadError, QueueFullError, OffloadOptionError, SessionHttpError, SessionStoreUnavailableError,
  SessionTooLargeError, CliUsageError, CliRuntimeError
} from 'clusterize-express'
import type {
  PrimaryHandle, ClusterizeOptions, ReloadStartEvent, ReloadResult, BridgeUpEvent, BridgeDownEvent,
  SessionDownEvent, SessionUpEvent, WorkerExitEvent, ClusterizeBusErrorCode, UpgradeResult, UpgradeStartEvent,
  PrimaryConnectionStats, ClusterSessionLeaseStats, WorkerFailureCounts, BusBridgeStatus, PrimaryBoundStats,
  ScaleResult, ScaleStartEvent, ScalingStats
} from 'clusterize-express'
import { expectType } from './expect.mjs'

declare const handle: PrimaryHandle

// ---- events: each listener gets its payload's type, not any
handle.on('reload:start', (event) => expectType<ReloadStartEvent>()(event))
handle.once('reload:start', (event) => expectType<number>()(event.generation))
handle.on('reload:done', (result) => expectType<ReloadResult>()(result))
handle.on('worker:exit', (event) => expectType<WorkerExitEvent>()(event))
handle.on('scale:start', (event) => expectType<ScaleStartEvent>()(event))
handle.once('scale:done', (result) => expectType<ScaleResult>()(result))
handle.scale?.(4).then((result) => expectType<number>()(result.to))
expectType<ScalingStats | undefined>()(handle.stats().scaling)
clusterize(() => (req, res) => res.end(), { workers: { min: 2, max: 'auto', upElu: 0.8, downAfterMs: 30000 } })
// @ts-expect-error workers.max is a count or 'auto'
clusterize(() => (req, res) => res.end(), { workers: { min: 1, max: 'max' } })
// @ts-expect-error handle.scale() takes a count
handle.scale?.('4')
handle.on('bridge:up', (state) => expectType<BridgeUpEvent>()(state))
handle.on('bridge:up', (state) => expectType<string>()(state.channel))
handle.on('bridge:down', (state) => expectType<BridgeDownEvent>()(state))
handle.once('bridge:down', (state) => expectType<string>()(state.lastError))
handle.on('session:down', (event) => expectType<SessionDownEvent>()(event))
handle.on('session:down', (event) => expectType<string | null>()(event.lastError))
handle.on('session:up', (event) => expectType<SessionUpEvent>()(event))
handle.once('session:up', (event) => expectType<number>()(event.id))
handle.on('upgrade:start', (event) => expectType<UpgradeStartEvent>()(event))
handle.on('upgrade:done', (result) => expectType<UpgradeResult>()(result))

// ---- stats: what the primary holds itself and what it refused for its bounds
expectType<PrimaryConnectionStats | undefined>()(handle.stats().connections)
expectType<PrimaryBoundStats | undefined>()(handle.stats().bounds)
expectType<number>()((handle.stats().bounds as PrimaryBoundStats).rateLimitKeysRefused)
declare const held: PrimaryConnectionStats
expectType<number>()(held.handoff)
expectType<number>()(held.handoffShed)
expectType<number>()(held.awaitingShed)
// ---- stats: failures by kind, slots a failed fork left empty; the option that tells request faults apart
expectType<WorkerFailureCounts | undefined>()(handle.stats().failures)
expectType<number[] | undefined>()(handle.stats().cannotFork)
declare const failures: WorkerFailureCounts
expectType<number>()(failures.request)
expectType<number>()(failures.fork)
const restartOptions: ClusterizeOptions = { restart: { stableAfterMs: 5000, maxCrashes: 5 } }
void restartOptions
handle.once('upgrade:done', (result) => expectType<string | undefined>()(result.reason))
const sessionStats = handle.stats().sessions
if (sessionStats) expectType<ClusterSessionLeaseStats | null>()(sessionStats.leases)
declare const leaseStats: ClusterSessionLeaseStats
expectType<number>()(leaseStats.released)
expectType<number>()(leaseStats.revoking)
const leaseOptions: ClusterizeOptions = { clusterStore: { leaseMs: 0, maxSessions: 10 } }
expectType<number | undefined>()(leaseOptions.clusterStore?.leaseMs)
if (handle.upgrade) handle.upgrade({ node: '/usr/bin/node', args: ['--workers', '4'] }).then((result) => expectType<UpgradeResult>()(result))
// @ts-expect-error upgrade args are strings
if (handle.upgrade) handle.upgrade({ args: [4] })
// @ts-expect-error reload:start carries the generation, not a result
handle.on('reload:start', (event) => expectType<ReloadResult>()(event))
// @ts-expect-error the checker itself: assignable is not equal
expectType<number>()(1 as number | undefined)
// @ts-expect-error the checker itself: any is not a payload type
expectType<ReloadStartEvent>()(null as any)

// ---- options
expectType<boolean | undefined>()(({} as ClusterizeOptions).banner)
clusterize(() => (req, res) => res.end(), { banner: false })
// @ts-expect-error banner is true or false
clusterize(() => (req, res) => res.end(), { banner: 'yes' })

// ---- errors: one base class, literal codes
expectType<string>()(new ClusterizeError('m', 'ERR_CLUSTERIZE_X_Y').code)
expectType<'ERR_CLUSTERIZE_CONFIG_OPTION' | 'ERR_CLUSTERIZE_OFFLOAD_OPTION'>()(new ClusterizeOptionError('m', 'port').code)
expectType<'ERR_CLUSTERIZE_BUS_TIMEOUT'>()(new ClusterizeTimeoutError('m').code)
expectType<'ERR_CLUSTERIZE_APP_INVALID'>()(new ClusterizeAppError('m').code)
expectType<ClusterizeBusErrorCode>()(new ClusterizeBusError('m', 'ERR_CLUSTERIZE_BUS_TOPIC').code)
expectType<'ERR_CLUSTERIZE_OFFLOAD_OPTION'>()(({} as OffloadOptionError).code)
expectType<'ERR_CLUSTERIZE_SESSION_STORE_UNAVAILABLE'>()(({} as SessionStoreUnavailableError).code)
expectType<'ERR_CLUSTERIZE_SESSION_TOO_LARGE'>()(({} as SessionTooLargeError).code)
expectType<'ERR_CLUSTERIZE_CLI_USAGE'>()(({} as CliUsageError).code)
expectType<'ERR_CLUSTERIZE_CLI_FAILED'>()(({} as CliRuntimeError).code)
type Extends<A, B> = A extends B ? true : false
expectType<true>()(true as Extends<ClusterizeOptionError, ClusterizeError>)
expectType<true>()(true as Extends<OffloadOptionError, ClusterizeOptionError>)
expectType<true>()(true as Extends<QueueFullError, OffloadError>)
expectType<true>()(true as Extends<OffloadError, ClusterizeError>)
expectType<true>()(true as Extends<SessionTooLargeError, SessionHttpError>)
expectType<true>()(true as Extends<SessionHttpError, ClusterizeError>)
expectType<true>()(true as Extends<CliUsageError, ClusterizeError>)
expectType<true>()(true as Extends<ClusterizeBusError, ClusterizeError>)
// @ts-expect-error a ClusterizeBusError carries only bus codes
new ClusterizeBusError('m', 'ERR_CLUSTERIZE_SESSION_TOO_LARGE')
try {
  bus.broadcast('t', 1)
} catch (err) {
  if (err instanceof ClusterizeError) expectType<string>()(err.code)
}
expectType<() => void>()(onDrain(() => {}))

// The bus bridge's status counts the frames it dropped as repeats (a retried PUBLISH).
declare const bridgeStatus: BusBridgeStatus
expectType<number>()(bridgeStatus.repeated)
expectType<number>()(bridgeStatus.flushed)

// ---- the primary handle without a cast (issue 52): isPrimary() narrows clusterize()'s result
import { isPrimary } from 'clusterize-express'
import type { WorkerHandle } from 'clusterize-express'
declare const either: ReturnType<typeof clusterize>
if (isPrimary(either)) {
  expectType<PrimaryHandle>()(either)
  expectType<Promise<ReloadResult>>()(either.reload())
} else {
  expectType<WorkerHandle>()(either)
  expectType<number>()(either.id)
}
// @ts-expect-error a worker's handle has no reload() until narrowed
either.reload()

// ---- PM2 parity options: reload.cron, watch, defaultSessionStore 'redis'
const pm2Options: ClusterizeOptions = { reload: { cron: '0 3 * * *' }, watch: { paths: ['src'], ignore: ['*.log'], debounceMs: 200 }, defaultSessionStore: 'redis' }
void pm2Options
clusterize('app.js', { watch: true })
clusterize('app.js', { watch: ['src', 'config'] })
// @ts-expect-error reload.cron is a cron expression string
clusterize('app.js', { reload: { cron: 3 } })
// @ts-expect-error defaultSessionStore is 'memory', 'cluster' or 'redis'
clusterize('app.js', { defaultSessionStore: 'mongo' })
