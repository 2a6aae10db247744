'use strict'

// docs/architecture.md lists the message kinds of lib/protocol.js, and the
// ops inside `bus` and `svc`, exactly: a kind added to or removed from
// protocol.js without the page (or the page's diagram) following fails here.
const { test } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const path = require('path')
const { KIND, BUS_OP, SERVICE_OP } = require('../lib/protocol')

const page = fs.readFileSync(path.join(__dirname, '..', 'docs', 'architecture.md'), 'utf8')

/** The text under a heading, up to the next heading of any level. */
function section (heading) {
  const start = page.indexOf(`\n${heading}\n`)
  assert.notStrictEqual(start, -1, `docs/architecture.md has the heading "${heading}"`)
  const rest = page.slice(start + heading.length + 2)
  const next = rest.search(/^#{1,6} /m)
  return next === -1 ? rest : rest.slice(0, next)
}

/** The first column of a table's rows, between backticks (the header and separator rows are skipped). */
function firstColumn (text) {
  return [...text.matchAll(/^\| `([^`]+)` \|/gm)].map((m) => m[1])
}

const sorted = (values) => [...values].sort()

test('the message kinds table lists every kind of lib/protocol.js, each once, and nothing else', () => {
  const listed = firstColumn(section('## Message kinds'))
  assert.deepStrictEqual(sorted(listed), sorted(Object.values(KIND)))
})

test('the diagram names every kind in its direction, and no kind that does not exist', () => {
  const diagram = /## The processes\n\n```\n([\s\S]*?)```/.exec(page)[1]
  const words = new Set(diagram.match(/[a-z][a-z-]*/g))
  for (const kind of Object.values(KIND)) assert.ok(words.has(kind), `the diagram names the kind ${kind}`)
  assert.ok(!words.has('accepted'), 'the diagram names no kind "accepted" (gone from protocol.js)')
})

test('the bus and service ops tables list every op of BUS_OP and SERVICE_OP with its name in code', () => {
  for (const [heading, ops] of [['### Ops inside `bus`', BUS_OP], ['### Ops inside `svc`', SERVICE_OP]]) {
    const rows = [...section(heading).matchAll(/^\| `([^`]+)` \| `([A-Z_]+)` \|/gm)].map((m) => [m[2], m[1]])
    assert.deepStrictEqual(sorted(rows.map((row) => row.join('='))), sorted(Object.entries(ops).map((row) => row.join('='))), heading)
  }
})
