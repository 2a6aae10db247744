'use strict'

// The pure parts of `npm run bench` (bench/run-all.js): which scripts run,
// the tables read back out of a script's output, and how a run's sections
// replace the previous RESULTS.md's. No benchmark runs here.
const { test } = require('node:test')
const assert = require('node:assert')
const { listScripts } = require('../bench/run-all')
const { parseTables } = require('../bench/lib/charts')
const { parseSections, renderSection, mergeResults, demoteHeadings, boxLabel } = require('../bench/lib/results')
const { AREAS } = require('../bench/lib/areas')

const SESSIONS_OUT = [
  '# Sessions: read + write per request',
  '',
  '| store | req/s (median) | vs recipe | p99 ms |',
  '|---|---:|---:|---:|',
  '| recipe | 6,000 | 1.00x | 12 |',
  '| cluster store, 2 workers | 7,800 | 1.30x | 11 |',
  '',
  '```sh',
  '# not a heading',
  '```'
].join('\n')

function context (extra) {
  return Object.assign({
    machine: '_Machine: test_',
    command: 'node bench/sessions.js --quick',
    runner: 'node bench/run-all.js --quick sessions',
    quick: true,
    loadBefore: [7.5, 6, 5],
    loadAfter: [8, 7, 6],
    cores: 2,
    charts: []
  }, extra)
}

test('every bench script but the diagnostics runs, in the areas\' order, and a subset by name', () => {
  const files = ['run-all.js', 'bus-trace.js', 'sessions.js', 'zzz-new.js', 'throughput.js', 'lib', 'README.md', 'reload.js']
  assert.deepStrictEqual(listScripts(files, []), ['throughput', 'reload', 'sessions', 'zzz-new'])
  assert.deepStrictEqual(listScripts(files, ['sessions.js', 'reload']), ['reload', 'sessions'])
  assert.deepStrictEqual(listScripts(files, ['bus-trace']), [])
  // Every area's script exists in bench/.
  const real = require('fs').readdirSync(require('path').join(__dirname, '..', 'bench'))
  for (const area of AREAS) assert.ok(real.includes(area.script + '.js'), area.script)
})

test('a script\'s tables are read back with their headers and cells', () => {
  const [table] = parseTables(SESSIONS_OUT)
  assert.deepStrictEqual(table.headers, ['store', 'req/s (median)', 'vs recipe', 'p99 ms'])
  assert.deepStrictEqual(table.rows, [['recipe', '6,000', '1.00x', '12'], ['cluster store, 2 workers', '7,800', '1.30x', '11']])
})

test('a section carries the command, the load, the box label and the script\'s tables under its own heading', () => {
  const section = renderSection({ name: 'sessions', stdout: SESSIONS_OUT, status: 'ok', seconds: 42 }, context())
  assert.match(section, /^<!-- bench:sessions -->\n## Sessions: bench\/sessions\.js\n/)
  assert.match(section, /<!-- \/bench:sessions -->$/)
  assert.match(section, /_Command: `node bench\/sessions\.js --quick`, run by `node bench\/run-all\.js --quick sessions` \(quick mode[^)]*\); ok, 42 s\./)
  assert.match(section, /Load average 7\.5 6\.0 5\.0 before, 8\.0 7\.0 6\.0 after, on 2 cores: \*\*busy box\*\* figures/)
  assert.match(section, /\n### Sessions: read \+ write per request\n/)
  assert.match(section, /\n# not a heading\n/, 'lines in code blocks are not headings')
  assert.match(section, /\*\*Notes\.\*\* Anchor: the recipe/)
  assert.deepStrictEqual(parseTables(section)[0].rows[1][2], '1.30x')
})

test('the box is quiet only under half a runnable task per core', () => {
  assert.strictEqual(boxLabel(0.9, 2), 'quiet box')
  assert.strictEqual(boxLabel(1.1, 2), 'busy box')
  assert.strictEqual(boxLabel(14, 2), 'busy box')
  assert.strictEqual(demoteHeadings('## a\ntext\n#no'), '#### a\ntext\n#no')
})

test('a run replaces its own sections, keeps the others, and drops free-form history', () => {
  const old = mergeResults('', new Map([
    ['throughput', renderSection({ name: 'throughput', stdout: '| a | b |\n|---|---:|\n| old | 1 |', status: 'ok', seconds: 1 }, context({ quick: false }))],
    ['sessions', renderSection({ name: 'sessions', stdout: '| a | b |\n|---|---:|\n| old | 1 |', status: 'ok', seconds: 1 }, context())]
  ]), { date: '2026-01-01T00:00:00.000Z' })
  const withHistory = old + '\n# Added on some day\n\n| a | b |\n|---|---:|\n| history | 9 |\n'
  const merged = mergeResults(withHistory, new Map([
    ['sessions', renderSection({ name: 'sessions', stdout: SESSIONS_OUT, status: 'ok', seconds: 2 }, context())]
  ]), { date: '2026-02-02T00:00:00.000Z' })

  const sections = parseSections(merged)
  assert.deepStrictEqual([...sections.keys()], ['throughput', 'sessions'])
  assert.match(sections.get('throughput'), /\| old \| 1 \|/, 'a section not run now is kept')
  assert.doesNotMatch(sections.get('sessions'), /\| old \|/, 'a section run now is replaced')
  assert.match(sections.get('sessions'), /1\.30x/)
  assert.doesNotMatch(merged, /Added on some day|\| history \|/, 'text outside the sections is not carried over')
  assert.match(merged, /^# Benchmark results\n/)
  assert.match(merged, /last written 2026-02-02T00:00:00\.000Z/)
  assert.strictEqual(merged.match(/^# (?!not a heading)/gm).length, 1, 'one top-level heading (the line in a code block is not one)')
  // Merging again with nothing new changes only the date.
  assert.strictEqual(mergeResults(merged, new Map(), { date: '2026-02-02T00:00:00.000Z' }), merged)
})

test('a script that timed out keeps what it printed, and says so', () => {
  const section = renderSection({ name: 'reload', stdout: '', status: 'timed out after 90 s', seconds: 95 }, context())
  assert.match(section, /timed out after 90 s, 95 s/)
  assert.match(section, /\(no output\)/)
})
