'use strict'

// The bus inside one process: payload checks, listeners and handlers, and
// single-process mode (workers: 0), where the process is both the primary
// and worker 0.

const test = require('node:test')
const assert = require('node:assert')
const path = require('path')
const { execFile } = require('child_process')
const { createCodec, checkTopic } = require('../lib/bus/codec')
const busModule = require('../lib/bus')

const { bus, busRuntime } = busModule
const configureBus = (config, options) => busRuntime.configure(config, options)
const busUseLocal = () => busRuntime.useLocal()
const busStatus = () => busRuntime.status()
const busClose = () => busRuntime.close()
const ROOT = path.join(__dirname, '..')

function runNode (code) {
  return new Promise((resolve) => {
    execFile(process.execPath, ['-e', code], { cwd: ROOT, timeout: 20000 }, (err, stdout, stderr) => {
      resolve({ code: err ? err.code : 0, stdout, stderr })
    })
  })
}

function tick () {
  return new Promise((resolve) => setImmediate(resolve))
}

test('topics are non-empty strings of at most 256 characters', () => {
  checkTopic('a', 'bus.on')
  checkTopic('x'.repeat(256), 'bus.on')
  for (const bad of ['', 'x'.repeat(257), 42, null, undefined, {}]) {
    assert.throws(() => checkTopic(bad, 'bus.broadcast'), { code: 'ERR_CLUSTERIZE_BUS_TOPIC', message: /^bus\.broadcast: topic must be a non-empty string of at most 256 characters/ })
  }
})

test('json codec: encodes once, refuses what JSON would drop or mangle, names the topic', () => {
  const codec = createCodec({ serialization: 'json', maxMessageBytes: 1000 })
  assert.strictEqual(codec.encode('t', { a: 1 }), '{"a":1}')
  assert.strictEqual(codec.encode('t', undefined), undefined)
  assert.deepStrictEqual(codec.decode(codec.encode('t', [1, 'two', null])), [1, 'two', null])
  const socket = new (require('net').Socket)()
  const cycle = {}
  cycle.cycle = cycle
  const cases = [
    [{ fn () {} }, /a function at key "fn"/],
    [() => {}, /a function/],
    [[Symbol('s')], /a symbol at key "0"/],
    [{ n: 1n }, /a BigInt/],
    [cycle, /a cycle/],
    [{ socket }, /socket, stream or server at key "socket"/],
    [{ m: new Map() }, /a Map at key "m".*'advanced'/]
  ]
  for (const [data, reason] of cases) {
    assert.throws(() => codec.encode('cache:flush', data), (err) => {
      assert.strictEqual(err.code, 'ERR_CLUSTERIZE_BUS_UNSERIALISABLE')
      assert.strictEqual(err.topic, 'cache:flush')
      assert.match(err.message, /topic "cache:flush"/)
      assert.match(err.message, reason)
      assert.match(err.message, /Send plain JSON data/)
      return true
    })
  }
})

test('the size limit is checked on the encoded bytes and says size, limit and option', () => {
  const codec = createCodec({ serialization: 'json', maxMessageBytes: 100 })
  codec.encode('t', 'x'.repeat(98)) // 100 bytes with the quotes
  assert.throws(() => codec.encode('t', 'x'.repeat(99)), (err) => {
    assert.strictEqual(err.code, 'ERR_CLUSTERIZE_BUS_TOO_LARGE')
    assert.strictEqual(err.size, 101)
    assert.strictEqual(err.limit, 100)
    assert.match(err.message, /topic "t" is 101 bytes once serialised, over the limit of 100 bytes \(option bus\.maxMessageBytes\)/)
    return true
  })
  // 40 characters, 120 bytes in UTF-8
  assert.throws(() => codec.encode('t', '€'.repeat(40)), { code: 'ERR_CLUSTERIZE_BUS_TOO_LARGE', size: 122 })
  const advanced = createCodec({ serialization: 'advanced', maxMessageBytes: 100 })
  assert.throws(() => advanced.encode('t', Buffer.alloc(200)), { code: 'ERR_CLUSTERIZE_BUS_TOO_LARGE' })
})

test("advanced codec: Map, Set, Buffer, Date, BigInt and cycles round-trip; functions and sockets do not", () => {
  const codec = createCodec({ serialization: 'advanced' })
  const data = { map: new Map([[1, 'a']]), set: new Set(['x']), buf: Buffer.from('hi'), date: new Date(5), big: 7n }
  data.self = data
  const back = codec.decode(codec.encode('t', data))
  assert.deepStrictEqual(back.map, data.map)
  assert.deepStrictEqual(back.set, data.set)
  assert.ok(Buffer.isBuffer(back.buf) || back.buf instanceof Uint8Array)
  assert.strictEqual(Buffer.from(back.buf).toString(), 'hi')
  assert.strictEqual(back.date.getTime(), 5)
  assert.strictEqual(back.big, 7n)
  assert.strictEqual(back.self, back)
  assert.throws(() => codec.encode('jobs', { run () {} }), { code: 'ERR_CLUSTERIZE_BUS_UNSERIALISABLE', message: /topic "jobs".*structured clone/ })
  assert.throws(() => codec.encode('jobs', new (require('net').Socket)()), { code: 'ERR_CLUSTERIZE_BUS_UNSERIALISABLE', message: /socket/ })
})

test('before clusterize() starts it, the bus registers listeners but refuses to send', async () => {
  const result = await runNode(`
    const { bus } = require('./lib/bus')
    bus.on('a', () => {})
    bus.handle('b', () => 1)
    const out = []
    for (const call of [() => bus.broadcast('a', 1), () => bus.send(0, 'a', 1), () => bus.request('b'), () => bus.gather('b')]) {
      try { call(); out.push('no error') } catch (err) { out.push(err.code) }
    }
    console.log(JSON.stringify(out))
  `)
  assert.strictEqual(result.code, 0, result.stderr)
  assert.deepStrictEqual(JSON.parse(result.stdout), Array(4).fill('ERR_CLUSTERIZE_BUS_NOT_STARTED'))
})

test('single-process mode (workers: 0)', async (t) => {
  const logged = []
  const logger = {
    info () {},
    warn (msg) { logged.push(['warn', msg]) },
    error (msg) { logged.push(['error', msg]) }
  }
  configureBus({ serialization: 'json', maxMessageBytes: 4096 }, { logger, role: 'primary' })
  busUseLocal()
  t.after(() => busClose())

  await t.test('status says local', () => {
    assert.deepStrictEqual(busStatus(), { role: 'local', serialization: 'json', maxMessageBytes: 4096, maxQueuedBytes: 16777216, bridge: null })
    assert.strictEqual(bus.role, 'local')
  })

  await t.test('broadcast reaches this process\'s listeners exactly once, with or without self, as worker 0', async () => {
    const got = []
    const listener = (data, meta) => got.push([data, meta])
    bus.on('local:b', listener)
    bus.broadcast('local:b', { n: 1 })
    bus.broadcast('local:b', { n: 2 }, { self: true })
    assert.deepStrictEqual(got, [], 'delivery is asynchronous')
    await tick()
    assert.deepStrictEqual(got, [
      [{ n: 1 }, { topic: 'local:b', from: 0, generation: 1 }],
      [{ n: 2 }, { topic: 'local:b', from: 0, generation: 1 }]
    ])
    bus.off('local:b', listener)
    bus.broadcast('local:b', { n: 3 })
    await tick()
    assert.strictEqual(got.length, 2)
  })

  await t.test('receivers get a copy, not the sender\'s object', async () => {
    const sent = { list: [1] }
    const { data } = await new Promise((resolve) => {
      bus.once('local:copy').then(resolve)
      bus.broadcast('local:copy', sent)
    })
    assert.deepStrictEqual(data, sent)
    assert.notStrictEqual(data, sent)
  })

  await t.test('once() fires once; once(topic) without a handler returns a promise', async () => {
    let calls = 0
    bus.once('local:once', () => calls++)
    bus.broadcast('local:once')
    bus.broadcast('local:once')
    await tick()
    assert.strictEqual(calls, 1)
    const next = bus.once('local:promise')
    bus.broadcast('local:promise', 'hello')
    assert.deepStrictEqual(await next, { data: 'hello', meta: { topic: 'local:promise', from: 0, generation: 1 } })
  })

  await t.test('a throwing or rejecting listener is logged and does not stop the others', async () => {
    const got = []
    bus.on('local:throw', () => { throw new Error('listener broke') })
    bus.on('local:throw', async () => { throw new Error('async listener broke') })
    bus.on('local:throw', (data) => got.push(data))
    bus.broadcast('local:throw', 'still delivered')
    await tick()
    await tick()
    assert.deepStrictEqual(got, ['still delivered'])
    assert.ok(logged.some(([level, msg]) => level === 'error' && /topic "local:throw" threw: listener broke/.test(msg)))
    assert.ok(logged.some(([level, msg]) => level === 'error' && /async listener broke/.test(msg)))
    bus.off('local:throw')
  })

  await t.test('send(0) and send(\'primary\') reach this process; other slots are dropped', async () => {
    const got = []
    bus.on('local:d', (data, meta) => got.push([data, meta.from]))
    assert.strictEqual(bus.send(0, 'local:d', 'a'), true)
    assert.strictEqual(bus.send('primary', 'local:d', 'b'), true)
    assert.strictEqual(bus.send(3, 'local:d', 'c'), false)
    assert.throws(() => bus.send(-1, 'local:d', 'x'), { code: 'ERR_CLUSTERIZE_BUS_TARGET' })
    await tick()
    assert.deepStrictEqual(got, [['a', 0], ['b', 0]])
  })

  await t.test('request() and gather() are answered here; errors, timeouts and missing handlers', async () => {
    const remove = bus.handle('local:double', async (n, meta) => ({ doubled: n * 2, from: meta.from }))
    assert.throws(() => bus.handle('local:double', () => 0), { code: 'ERR_CLUSTERIZE_BUS_HANDLER_EXISTS' })
    assert.deepStrictEqual(await bus.request('local:double', 21), { doubled: 42, from: 0 })
    const answers = await bus.gather('local:double', 2)
    assert.deepStrictEqual(Array.from(answers), [{ workerId: 0, pid: process.pid, result: { doubled: 4, from: 0 } }])
    assert.deepStrictEqual(answers.missing, [])
    remove()
    await assert.rejects(bus.request('local:double', 1), { code: 'ERR_CLUSTERIZE_BUS_NO_HANDLER', message: /no handler for topic "local:double"/ })

    bus.handle('local:fail', () => { throw Object.assign(new Error('nope'), { code: 'E_APP' }) })
    await assert.rejects(bus.request('local:fail'), { message: 'nope', code: 'E_APP' })
    const failed = await bus.gather('local:fail')
    assert.strictEqual(failed[0].error.message, 'nope')

    bus.handle('local:hang', () => new Promise(() => {}))
    await assert.rejects(bus.request('local:hang', null, { timeoutMs: 30 }), { code: 'ERR_CLUSTERIZE_BUS_TIMEOUT', message: /within 30 ms/ })
    const partial = await bus.gather('local:hang', null, { timeoutMs: 30 })
    assert.deepStrictEqual(Array.from(partial), [])
    assert.deepStrictEqual(partial.missing, [0])
    assert.throws(() => bus.request('local:hang', null, { timeoutMs: -1 }), { code: 'ERR_CLUSTERIZE_BUS_OPTION' })

    bus.handle('local:huge', () => 'x'.repeat(5000))
    await assert.rejects(bus.request('local:huge'), { code: 'ERR_CLUSTERIZE_BUS_TOO_LARGE', message: /reply on topic "local:huge"/ })
  })

  await t.test('oversized and unserialisable messages throw synchronously', () => {
    assert.throws(() => bus.broadcast('local:big', 'x'.repeat(5000)), { code: 'ERR_CLUSTERIZE_BUS_TOO_LARGE', message: /bus\.maxMessageBytes/ })
    assert.throws(() => bus.request('local:big', { f () {} }), { code: 'ERR_CLUSTERIZE_BUS_UNSERIALISABLE', message: /topic "local:big"/ })
    assert.throws(() => bus.gather('', 1), { code: 'ERR_CLUSTERIZE_BUS_TOPIC' })
  })
})

test('clusterize({ workers: 0 }) wires the bus in single-process mode', async () => {
  const result = await runNode(`
    const { clusterize, bus } = require('./')
    bus.handle('q', (n) => n + 1)
    const handle = clusterize(() => (req, res) => res.end('ok'), { workers: 0, port: 0, host: '127.0.0.1', logger: false })
    handle.ready.then(async () => {
      const got = bus.once('b')
      bus.broadcast('b', 'hi')
      const out = { received: await got, answer: await bus.request('q', 1), gathered: Array.from(await bus.gather('q', 2)) }
      console.log(JSON.stringify(out))
      await handle.shutdown()
    })
  `)
  assert.strictEqual(result.code, 0, result.stderr)
  const out = JSON.parse(result.stdout.trim().split('\n').pop())
  assert.deepStrictEqual(out.received, { data: 'hi', meta: { topic: 'b', from: 0, generation: 1 } })
  assert.strictEqual(out.answer, 2)
  assert.strictEqual(out.gathered[0].result, 3)
})

test("the app's bus and the library channel never meet: no reserved prefix in the app's topics, the library's messages reach only library listeners", async () => {
  configureBus({}, { role: 'local' })
  busUseLocal()
  const { libraryChannel } = require('../lib/bus/library')
  const appGot = []
  const libraryGot = []
  bus.on('sio:/', (data) => appGot.push(data))
  bus.on('$cz:x', (data) => appGot.push(data))
  libraryChannel.on('sio:/', (data) => libraryGot.push(data))
  libraryChannel.broadcast('sio:/', 'for the library')
  bus.broadcast('sio:/', 'for the app')
  bus.broadcast('$cz:x', 'an ordinary app topic')
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepStrictEqual(appGot, ['for the app', 'an ordinary app topic'])
  assert.deepStrictEqual(libraryGot, ['for the library'])
  const marked = (err) => err.code === 'ERR_CLUSTERIZE_BUS_TOPIC' && /may not start with a NUL/.test(err.message)
  assert.throws(() => bus.broadcast('\u0000sio:/'), marked)
  assert.throws(() => bus.on('\u0000sio:/', () => {}), marked)
  assert.throws(() => bus.handle('\u0000x', () => 1), marked)
  assert.strictEqual(busModule.internalBus, undefined, 'no internalBus')
  bus.off('sio:/')
  bus.off('$cz:x')
  libraryChannel.off('sio:/')
  await busClose()
})

test("'json' serialization refuses NaN and Infinity instead of turning them into null", () => {
  const codec = createCodec({ serialization: 'json' })
  for (const value of [NaN, Infinity, -Infinity, { a: NaN }, [1, Infinity], { deep: { x: -Infinity } }]) {
    assert.throws(() => codec.encode('t', value), (err) => err.code === 'ERR_CLUSTERIZE_BUS_UNSERIALISABLE' && /(NaN|Infinity).*JSON would turn it into null/.test(err.message), String(JSON.stringify(value)))
  }
  assert.strictEqual(codec.encode('t', { a: 1.5, b: -0, c: null }), '{"a":1.5,"b":0,"c":null}')
  const advanced = createCodec({ serialization: 'advanced' })
  assert.ok(Number.isNaN(require('v8').deserialize(advanced.encode('t', NaN))), "'advanced' carries NaN as is")
})
