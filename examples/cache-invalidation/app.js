'use strict'

// An Express app with an in-memory cache in each worker, kept coherent by bus
// broadcasts. The source of truth is a slow "database" (a JSON file here).
// A write updates the database, drops the key from this worker's cache and
// broadcasts the invalidation so every other worker drops it too.
//
//   curl localhost:3000/products/1            # miss, then hits (per worker)
//   curl -X PUT 'localhost:3000/products/1?price=12'
//   curl localhost:3000/products/1            # every worker serves the new price
//   curl localhost:3000/cache                 # how many keys each worker caches (bus.gather)

const fs = require('fs')
const os = require('os')
const path = require('path')
const express = require('express')
const { bus } = require('../../') // require('clusterize-express') in your app

const DB_FILE = process.env.CACHE_DEMO_DB || path.join(os.tmpdir(), 'clusterize-cache-demo.json')

function readDb () {
  try {
    return JSON.parse(fs.readFileSync(DB_FILE, 'utf8'))
  } catch {
    return { 1: { name: 'kettle', price: 10 }, 2: { name: 'teapot', price: 25 } }
  }
}

async function slowQuery (id) {
  await new Promise((resolve) => setTimeout(resolve, 50)) // pretend it is a real database
  return readDb()[id] || null
}

module.exports = function createApp () {
  const cache = new Map()
  const worker = process.env.CLUSTERIZE_WORKER_ID || '0'

  bus.on('cache:invalidate', ({ key }) => cache.delete(key))
  bus.handle('cache:size', () => cache.size)

  const app = express()

  app.get('/products/:id', async (req, res) => {
    const key = 'product:' + req.params.id
    let cached = true
    if (!cache.has(key)) {
      cached = false
      cache.set(key, await slowQuery(req.params.id))
    }
    const product = cache.get(key)
    if (!product) return res.status(404).json({ error: 'no such product', worker })
    res.json({ product, cached, worker })
  })

  app.put('/products/:id', (req, res) => {
    const db = readDb()
    const id = req.params.id
    db[id] = Object.assign({ name: 'product ' + id }, db[id], { price: Number(req.query.price) })
    fs.writeFileSync(DB_FILE, JSON.stringify(db))
    const key = 'product:' + id
    cache.delete(key) // this worker, right now
    bus.broadcast('cache:invalidate', { key }) // every other worker (and other hosts with bus.redis)
    res.json({ product: db[id], worker })
  })

  app.get('/cache', async (req, res) => {
    const answers = await bus.gather('cache:size', null, { timeoutMs: 1000 })
    res.json({
      workers: answers.map((a) => ({ worker: a.workerId, keys: a.result, error: a.error && a.error.message })),
      missing: answers.missing
    })
  })

  return app
}
