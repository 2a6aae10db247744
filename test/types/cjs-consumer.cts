// A CommonJS TypeScript consumer using require().
import cz = require('clusterize-express')

const handle = cz.clusterize(() => require('express')(), { workers: 0 })
if ('stats' in handle) console.log(handle.stats().workers.length, handle.stats().sessions?.bytes)
cz.session({ store: 'cluster', prefix: 'admin:', maxTotalBytes: 64 * 1024 * 1024, maxSessionBytes: 64 * 1024 })
cz.bus.on('topic', (data: unknown) => console.log(data))

// @ts-expect-error port must be a number or numeric string
cz.clusterize(() => require('express')(), { port: { value: 1 } })

cz.clusterize(() => require('express')(), { workers: 2, spare: 1, reload: { bakeMs: 3000 } })
// @ts-expect-error workers is a number or 'auto' (strings from WORKERS are parsed at run time)
cz.clusterize(() => require('express')(), { workers: 'many' })

// clusterize-express/socket.io: the adapter and its connection-state recovery bounds.
import sio = require('clusterize-express/socket.io')
sio.createAdapter({ heartbeatInterval: 500, recovery: { maxPackets: 1000, maxSessions: 5000, liveWaitMs: 2000 } })
// @ts-expect-error recovery.maxPackets is a number
sio.createAdapter({ recovery: { maxPackets: 'many' } })
