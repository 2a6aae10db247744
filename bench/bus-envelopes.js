'use strict'

/**
 * bench/bus-envelopes.js: what a library message (a socket.io broadcast's
 * ClusterMessage) costs on each hop in the two wire forms, on Node's JSON
 * IPC channel (JSON.stringify/JSON.parse, as process.send does it):
 *
 *   string  today's: the bus codec's string inside the envelope (the sender
 *           encodes twice, the primary passes the string through, each
 *           receiver decodes twice)
 *   object  the object itself inside the envelope (one encode and one decode
 *           per hop). Its sender column has no size check at all (a lower
 *           bound: a real one walks the object in JavaScript or encodes it).
 *
 * In one process, no I/O: the JSON work only, per message, for a small
 * broadcast and a 10 KB one, and the primary's side of a numbered copy with
 * connectionStateRecovery. The primary relays to 2 workers.
 *
 *   node bench/bus-envelopes.js [--iterations=200000]
 */

const { machineLine } = require('./lib/machine')
const { markdownTable, fmt, ratio } = require('./lib/table')

// --quick (npm run bench -- --quick): a quarter of the iterations.
const ITERATIONS = Number((process.argv.find((a) => a.startsWith('--iterations=')) || (process.argv.includes('--quick') ? '--iterations=50000' : '--iterations=200000')).split('=')[1])
const TOPIC = '\u0000sio:/'
const WORKERS = 2

function clusterMessage (argument) {
  return { uid: 'a1b2c3d4e5', nsp: '/', type: 3, data: { packet: { type: 2, nsp: '/', data: ['m', argument] }, opts: { rooms: [], except: [], flags: {} } } }
}

const small = () => ({ t: 'm', m: clusterMessage(Date.now() + Math.random()) })
const large = () => ({ t: 'm', m: clusterMessage({ text: 'she said "hello" and left. '.repeat(370), n: Math.random() }) })

/** ns per call of fn(message), over a pool of 1000 messages, after a warm-up. */
function measure (make, fn) {
  const pool = Array.from({ length: 1000 }, make)
  const iterations = Math.max(1000, Math.floor(ITERATIONS / (make === large ? 20 : 1)))
  for (let i = 0; i < Math.min(iterations, 20000); i++) fn(pool[i % 1000])
  const started = process.hrtime.bigint()
  for (let i = 0; i < iterations; i++) fn(pool[i % 1000])
  return Number(process.hrtime.bigint() - started) / iterations
}

const sendString = (message) => JSON.stringify({ $cz: 1, kind: 'bus', op: 'B', m: [TOPIC, JSON.stringify(message)], n: 100 })
const sendObject = (message) => JSON.stringify({ $cz: 1, kind: 'bus', op: 'B', m: [TOPIC, message], n: 100, z: [100] })
const relay = (payload) => JSON.stringify({ $cz: 1, kind: 'bus', op: 'M', m: [TOPIC, payload, 0, 1] })

function hops (make) {
  const stringLines = Array.from({ length: 1000 }, () => sendString(make()))
  const objectLines = Array.from({ length: 1000 }, () => sendObject(make()))
  const stringRelays = Array.from({ length: 1000 }, () => relay(JSON.stringify(make())))
  const objectRelays = Array.from({ length: 1000 }, () => relay(make()))
  let i = 0
  const next = (list) => list[i++ % 1000]
  return {
    sender: [measure(make, sendString), measure(make, sendObject)],
    primary: [
      measure(make, () => { const envelope = JSON.parse(next(stringLines)); for (let w = 0; w < WORKERS; w++) relay(envelope.m[1]) }),
      measure(make, () => { const envelope = JSON.parse(next(objectLines)); for (let w = 0; w < WORKERS; w++) relay(envelope.m[1]) })
    ],
    receiver: [
      measure(make, () => JSON.parse(JSON.parse(next(stringRelays)).m[1])),
      measure(make, () => JSON.parse(next(objectRelays)).m[1])
    ]
  }
}

/** The primary's side of a numbered copy (recovery): the worker's 'pub' in, the copy out to each worker. */
function recovery () {
  const pub = (form) => () => {
    const data = { op: 'pub', n: '/', i: 1, m: clusterMessage(Math.random()) }
    return form === 'string'
      ? JSON.stringify({ $cz: 1, kind: 'svc', op: 'n', s: 'recovery', m: 'pub', d: JSON.stringify(data), x: 1 })
      : JSON.stringify({ $cz: 1, kind: 'svc', op: 'n', s: 'recovery', m: 'pub', d: data })
  }
  const stringPubs = Array.from({ length: 1000 }, pub('string'))
  const objectPubs = Array.from({ length: 1000 }, pub('object'))
  let i = 0
  return [
    measure(small, () => {
      const data = JSON.parse(JSON.parse(stringPubs[i++ % 1000]).d)
      const copy = JSON.stringify({ t: 'm', m: data.m, i: data.i, o: 'e:1', q: 1 })
      for (let w = 0; w < WORKERS; w++) relay(copy)
    }),
    measure(small, () => {
      const data = JSON.parse(objectPubs[i++ % 1000]).d
      const copy = { t: 'm', m: data.m, i: data.i, o: 'e:1', q: 1 }
      for (let w = 0; w < WORKERS; w++) relay(copy)
    })
  ]
}

function main () {
  console.log('## Library messages on the JSON IPC channel: the codec\'s string inside the envelope, or the object itself (ns per message)\n')
  console.log(machineLine())
  console.log('\nJSON work only, in one process. The primary relays to 2 workers. "object" sender: no size check (a lower bound).\n')
  const rows = []
  for (const [name, make] of [['small broadcast', small], ['10 KB broadcast', large]]) {
    const result = hops(make)
    for (const hop of ['sender', 'primary', 'receiver']) {
      const [string, object] = result[hop]
      rows.push([name, hop, fmt(string), fmt(object), ratio(object, string)])
    }
  }
  const [string, object] = recovery()
  rows.push(['small, recovery on', 'primary (pub in, numbered copies out)', fmt(string), fmt(object), ratio(object, string)])
  console.log(markdownTable(['message', 'hop', 'string (today) ns', 'object ns', 'object vs string'], rows))
}

main()
