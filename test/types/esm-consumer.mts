// An ESM TypeScript consumer: every public API, and calls that must not compile.
import express from 'express'
import { clusterize, offload, session, bus, ClusterizeError, ClusterizeOptionError } from 'clusterize-express'
import type { PrimaryHandle, ReloadResult, WorkerExitEvent, ClusterizeOptions } from 'clusterize-express'

const options: ClusterizeOptions = {
  port: 3000,
  workers: 'auto',
  scheduling: 'sticky',
  health: { heartbeatMs: 1000, maxMemoryMB: 512 },
  restart: { maxCrashes: 5 },
  reload: { signal: 'SIGUSR2', batch: 1 },
  shutdown: { timeoutMs: 25000 },
  probes: { port: 9090 },
  bus: { redis: 'redis://127.0.0.1:6379', serialization: 'advanced' },
  logger: console
}

function createApp () {
  const app = express()
  app.use(session({ secret: 'a'.repeat(32), store: 'auto' }))
  app.use(offload({ threads: 2, maxQueue: 100, taskTimeoutMs: 5000 }))
  app.get('/square', async (req, res) => {
    const value: number = await req.offload((n: number) => n * n, 7)
    res.json({ value })
  })
  app.get('/route', offload.route((a: number, b: number) => a + b, (req) => [1, 2]))
  return app
}

const handle = clusterize(createApp, options) as PrimaryHandle
handle.on('worker:exit', (event: WorkerExitEvent) => { console.log(event.reason, event.code) })
handle.reload().then((result: ReloadResult) => console.log(result.ok, result.rolledBack))
handle.shutdown().then((result) => console.log(result.code))

bus.on('cache:invalidate', (data, meta) => console.log(data, meta.from))
bus.broadcast('cache:invalidate', { key: 'user:1' })
bus.drained().then(() => bus.broadcast('cache:invalidate', { key: 'user:2' }))
const stopWatchingDrops: () => void = bus.onDropped((info) => console.log(info.workerId, info.count, info.topic))
stopWatchingDrops()
clusterize(createApp, { bus: { stallTimeoutMs: 2000, outageBufferBytes: 1024 * 1024 } })
// @ts-expect-error stallTimeoutMs is a number of milliseconds
clusterize(createApp, { bus: { stallTimeoutMs: '5s' } })

const pool = offload.pool({ threads: 1 })
pool.run((x: number) => x + 1, 1).then((n) => n.toFixed())

if (new ClusterizeOptionError('x', 'port') instanceof ClusterizeError) console.log('ok')

// @ts-expect-error workers must be a number or 'auto'
clusterize(createApp, { workers: true })
// @ts-expect-error scheduling is one of the five modes
clusterize(createApp, { scheduling: 'random' })
// @ts-expect-error the first argument is a factory or a module path
clusterize(42)
// @ts-expect-error session store kinds are fixed
session({ secret: 'x', store: 'postgres' })
// @ts-expect-error offload options are typed
offload({ threads: 'many' })
// @ts-expect-error the bus needs a topic
bus.broadcast()

// The ESM entry's types (types/index.d.mts): the default export is the CommonJS module.exports,
// the same values as the named exports; and the socket.io entry imports from ESM too.
import clusterizeExpress from 'clusterize-express'
import { createAdapter } from 'clusterize-express/socket.io'
import { expectType } from './expect.mjs'
expectType<typeof clusterize>()(clusterizeExpress.clusterize)
expectType<typeof bus>()(clusterizeExpress.bus)
const adapter: (nsp: any) => any = createAdapter({ recovery: { maxPackets: 100 } })
void adapter
// @ts-expect-error the default export has only what the package exports
clusterizeExpress.notExported()
