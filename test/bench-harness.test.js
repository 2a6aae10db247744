'use strict'

// The pure parts of `npm run bench` (bench/run-all.js): which scripts run,
// the tables read back out of a script's output, and how a run's sections
// replace the previous RESULTS.md's. No benchmark runs here.
const { test } = require('node:test')
const assert = require('node:assert')
const { listScripts, FULL_ONLY } = require('../bench/run-all')
const { parseTables } = require('../bench/lib/charts')
const { parseSections, renderSection, mergeResults, runSummaryLine, demoteHeadings, boxLabel, otherWorkLabel } = require('../bench/lib/results')
const { cpuSample, otherCores } = require('../bench/lib/other-load')
const { spawnSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
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
  assert.deepStrictEqual(listScripts(files.concat('instructions.js'), []), ['throughput', 'reload', 'sessions', 'zzz-new'])
  // --quick leaves out the full-only scripts unless they are named.
  const withFullOnly = files.concat(FULL_ONLY.map((name) => name + '.js'))
  assert.deepStrictEqual(listScripts(withFullOnly, [], true), ['throughput', 'reload', 'sessions', 'zzz-new'])
  assert.deepStrictEqual(listScripts(withFullOnly, [], false).length, 4 + FULL_ONLY.length)
  assert.deepStrictEqual(listScripts(withFullOnly, [FULL_ONLY[0]], true), [FULL_ONLY[0]])
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

test('the label counts the CPU of other work, not the benchmark\'s own (Linux)', { skip: process.platform !== 'linux' && 'reads /proc' }, async () => {
  const { spawn, spawnSync } = require('child_process')
  const spin = 'const end = Date.now() + 1500; while (Date.now() < end) {}'
  // The benchmark's own work: a child this process waits for (reaped, so in its cutime).
  let before = cpuSample()
  spawnSync(process.execPath, ['-e', spin])
  const ownRun = otherCores(before, cpuSample())
  // Other work: a process outside this one's reaped children (detached, its exit not waited for
  // through this process's accounting until after the sample).
  const other = spawn(process.execPath, ['-e', spin + ' ; setTimeout(() => {}, 1000)'], { stdio: 'ignore' })
  before = cpuSample()
  await new Promise((resolve) => setTimeout(resolve, 1200))
  const otherRun = otherCores(before, cpuSample())
  await new Promise((resolve) => other.once('exit', resolve))
  assert.ok(otherRun - ownRun > 0.3, `a spinning outside process shows (${otherRun.toFixed(2)} cores) beyond the own child's run (${ownRun.toFixed(2)} cores)`)
  assert.strictEqual(otherWorkLabel(0.4, 2), 'quiet box')
  assert.strictEqual(otherWorkLabel(0.6, 2), 'busy box')
  const section = renderSection({ name: 'throughput', stdout: 'x', status: 'ok', seconds: 1 }, Object.assign(context({ quick: true }), { otherCores: 0.1 }))
  assert.match(section, /Other work used 0\.10 of 2 cores during the run .*\*\*quiet box\*\*/)
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

test('the run\'s line names its command, its total time and every script that failed', () => {
  const ok = runSummaryLine({ command: 'node bench/run-all.js --quick', runs: [{ name: 'bus', status: 'ok', seconds: 3 }], seconds: 125, finished: true })
  assert.strictEqual(ok, 'Last run: `node bench/run-all.js --quick`: 1 script in 2 min 5 s, every script ok.')
  const failed = runSummaryLine({
    command: 'node bench/run-all.js',
    runs: [{ name: 'bus', status: 'exit code 1', seconds: 0 }, { name: 'reload', status: 'ok', seconds: 9 }, { name: 'crash', status: 'timed out after 150 s', seconds: 155 }],
    seconds: 61,
    finished: false
  })
  assert.match(failed, /3 scripts in 1 min 1 s so far/)
  assert.match(failed, /\*\*FAILED: bus \(exit code 1\); crash \(timed out after 150 s\)\*\*/)
  const merged = mergeResults('', new Map(), { date: 'd', run: { command: 'c', runs: [{ name: 'bus', status: 'exit code 1', seconds: 0 }], seconds: 1, finished: true } })
  assert.match(merged, /\nLast run: `c`: 1 script in 0 min 1 s; \*\*FAILED: bus \(exit code 1\)\*\*\.\n/)
  const section = renderSection({ name: 'bus', stdout: 'TypeError: x', status: 'exit code 1', seconds: 0 }, context())
  assert.match(section, /; exit code 1, 0 s\. .*\n\n\*\*FAILED: bench\/bus\.js exit code 1;/)
})

test('run-all exits non-zero and says so in RESULTS.md when a script fails or overruns, and prints the total time', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-run-all-'))
  try {
    fs.writeFileSync(path.join(dir, 'fine.js'), "console.log('| row | n |\\n|---|---:|\\n| a | 1 |')\n")
    fs.writeFileSync(path.join(dir, 'broken.js'), "console.log('before'); process.exit(3)\n")
    fs.writeFileSync(path.join(dir, 'stuck.js'), 'setInterval(() => {}, 1000)\n')
    const out = spawnSync(process.execPath, [path.join(__dirname, '..', 'bench', 'run-all.js'), '--quick'], {
      env: Object.assign({}, process.env, { BENCH_RUN_ALL_DIR: dir, BENCH_SCRIPT_TIMEOUT_MS: '1500' }),
      encoding: 'utf8',
      timeout: 60000
    })
    assert.strictEqual(out.status, 1, out.stderr)
    assert.match(out.stderr, /--- bench\/broken\.js: exit code 3, \d+ s/)
    assert.match(out.stderr, /Last run: `node bench\/run-all\.js --quick`: 3 scripts in 0 min \d+ s; \*\*FAILED: broken \(exit code 3\); stuck \(timed out after 2 s/)
    const results = fs.readFileSync(path.join(dir, 'RESULTS.md'), 'utf8')
    assert.match(results, /\nLast run: `node bench\/run-all\.js --quick`: 3 scripts in .*\*\*FAILED: broken \(exit code 3\); stuck \(timed out/)
    assert.match(parseSections(results).get('broken'), /\*\*FAILED: bench\/broken\.js exit code 3;/)
    assert.match(parseSections(results).get('stuck'), /\*\*FAILED: bench\/stuck\.js timed out/)
    assert.doesNotMatch(parseSections(results).get('fine'), /FAILED/)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test("wrk's report is read back: req/s, the p50 and p99 in their units, socket errors and non-2xx apart", () => {
  const { parseWrk } = require('../bench/lib/wrk')
  const report = [
    'Running 3s test @ http://127.0.0.1:4000/count',
    '  1 threads and 20 connections',
    '  Latency Distribution',
    '     50%    3.10ms',
    '     99%    1.25s ',
    '  14565 requests in 3.00s, 3.09MB read',
    '  Socket errors: connect 0, read 2, write 1, timeout 4',
    '  Non-2xx or 3xx responses: 5',
    'Requests/sec:   4854.72'
  ].join('\n')
  assert.deepStrictEqual(parseWrk(report), { rps: 4854.72, total: 14565, p50: 3.1, p99: 1250, failed: 12, non2xx: 5, errors: 7 })
  const clean = parseWrk('     99%  812.00us\n  10 requests in 1.00s, 1KB read\nRequests/sec:     10.00')
  assert.deepStrictEqual(clean, { rps: 10, total: 10, p50: NaN, p99: 0.812, failed: 0, non2xx: 0, errors: 0 })
})

test('the wrk cookie script gives the requests each cookie in turn, quoted, and is removed', () => {
  const { wrkCookieScript } = require('../bench/lib/wrk')
  const script = wrkCookieScript(['connect.sid=s%3Aa.b', 'connect.sid=s%3Ac.d'])
  try {
    const lua = fs.readFileSync(script.file, 'utf8')
    assert.match(lua, /local cookies = \{\n {2}"connect\.sid=s%3Aa\.b",\n {2}"connect\.sid=s%3Ac\.d"\n\}/)
    assert.match(lua, /\["Cookie"\] = cookies\[\(n % #cookies\) \+ 1\]/)
  } finally {
    script.remove()
  }
  assert.strictEqual(fs.existsSync(script.file), false)
})

test('under a real wrk, the per-connection script keeps one cookie per connection, and the spread one gives each connection every cookie', async () => {
  const http = require('http')
  const { hasWrk, wrkRun, wrkCookieScript } = require('../bench/lib/wrk')
  assert.ok(hasWrk(), 'wrk is installed (Debian package wrk; .ci/run installs it)')
  const cookies = ['s=1', 's=2', 's=3']
  /** @type {Map<import('net').Socket, Set<string>>} */
  const seen = new Map()
  const server = http.createServer((req, res) => {
    if (!seen.has(req.socket)) seen.set(req.socket, new Set())
    seen.get(req.socket).add(req.headers.cookie)
    res.end('ok')
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = server.address().port
  try {
    const perConnection = wrkCookieScript(cookies, { perConnection: true })
    try {
      await wrkRun({ port, connections: 3, threads: 3, seconds: 1, script: perConnection.file })
    } finally {
      perConnection.remove()
    }
    const sets = Array.from(seen.values())
    assert.equal(sets.length, 3, 'three connections')
    for (const set of sets) assert.equal(set.size, 1, `one cookie per connection, got ${Array.from(set)}`)
    assert.deepEqual(sets.map((set) => Array.from(set)[0]).sort(), cookies, 'each connection its own')
    seen.clear()
    const spread = wrkCookieScript(cookies)
    try {
      await wrkRun({ port, connections: 2, seconds: 1, script: spread.file })
    } finally {
      spread.remove()
    }
    for (const set of seen.values()) assert.equal(set.size, 3, 'every connection carried every cookie')
  } finally {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
})

test('the per-worker MemoryStore rows of bench/sessions.js keep a connection\'s session on the worker that serves it, also when it was made on the other', async () => {
  const http = require('http')
  const net = require('net')
  const { request } = require('./helpers/cluster')
  const { startServer, stopServer, prepare } = require('../bench/sessions')
  // A new session's first count is NaN (JSON null), and null + 1 is 1.
  const visitsSoFar = (visits) => visits === null ? 0 : visits
  for (const runtime of ['clusterize', 'raw']) {
    const server = await startServer('cluster', { store: 'raw-memory', workers: 2, runtime })
    // One kept-alive connection per session, each agent's only one.
    const sockets = []
    const agents = []
    try {
      // Logged in one connection after another, then every connection opened before any sends a
      // request, as wrk does: the primary's order of workers for these is not the logins', so
      // without the fix some (often half) of them land on the worker that did not make their session.
      const cookies = await prepare(server.port)
      for (let i = 0; i < cookies.length; i++) {
        const socket = await new Promise((resolve, reject) => {
          const connecting = net.connect(server.port, '127.0.0.1', () => resolve(connecting)).once('error', reject)
        })
        sockets.push(socket)
        const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
        agent.createConnection = () => socket
        agents.push(agent)
      }
      const count = (i) => request(server.port, '/count', { headers: { cookie: cookies[i] }, agent: agents[i] })
      let previous = await Promise.all(cookies.map((cookie, i) => count(i)))
      for (let round = 0; round < 3; round++) {
        const now = await Promise.all(cookies.map((cookie, i) => count(i)))
        now.forEach((res, i) => {
          assert.equal(res.status, 200, `${runtime}: connection ${i}: ${res.status} ${res.body}`)
          assert.equal(res.json.pid, previous[i].json.pid, `${runtime}: connection ${i} stays on one worker`)
          assert.equal(res.json.visits, visitsSoFar(previous[i].json.visits) + 1, `${runtime}: connection ${i} counts on from its last request (${previous[i].json.visits} then ${res.json.visits}), not from a new session`)
        })
        previous = now
      }
    } finally {
      // Also those no request has used yet, which their agent does not know.
      for (const socket of sockets) socket.destroy()
      await stopServer(server)
    }
  }
})

test('the client loop stops when its signal aborts, and fails a request unanswered within timeoutMs as ETIMEDOUT', async () => {
  const http = require('http')
  const { runClientLoop } = require('../bench/lib/load')
  let answered = 0
  const silent = []
  const server = http.createServer((req, res) => {
    if (req.url === '/never') return silent.push(res) // no answer: the client's timeout must end it
    answered++
    res.end('ok')
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = server.address().port
  try {
    // A ten-minute loop that only the signal can end within the test's time.
    const done = new AbortController()
    const loop = runClientLoop({ port, concurrency: 2, durationMs: 10 * 60 * 1000, signal: done.signal })
    while (answered < 20) await new Promise((resolve) => setTimeout(resolve, 10))
    done.abort()
    const result = await loop
    assert.ok(result.samples.length >= 20)
    assert.ok(result.samples.every((s) => s.ok))

    // One request: it starts at once and outlasts the loop's duration, so none follows it. (With
    // a duration of 1 ms, a millisecond tick or a GC pause before the loop's first check left none.)
    const stalled = await runClientLoop({ port, concurrency: 1, durationMs: 150, timeoutMs: 200, pickPath: () => '/never' })
    assert.deepStrictEqual(stalled.samples.map((s) => s.ok), [false])
    assert.deepStrictEqual(stalled.errors, { ETIMEDOUT: 1 })
  } finally {
    for (const res of silent) res.destroy()
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
})

test('the box-speed meter: CPU microseconds for a fixed work, and a spread of its 90th percentile over its 10th', () => {
  const { createBoxSpeed, sampleCpuMicros } = require('../bench/lib/box-speed')
  assert.ok(sampleCpuMicros() > 0)
  const speed = createBoxSpeed()
  assert.deepStrictEqual(speed.summary(), { samples: 0, spread: NaN })
  for (let i = 0; i < 5; i++) assert.ok(speed.sample() > 0)
  const summary = speed.summary()
  assert.strictEqual(summary.samples, 5)
  assert.ok(summary.spread >= 1, `spread ${summary.spread}`)
})

test('the instruction count of a callgrind output is its totals line, else its summary line', () => {
  const { callgrindTotal } = require('../bench/instructions')
  const header = '# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 4242\ncmd:  node server.js\npart: 3\n\nevents: Ir\n'
  assert.strictEqual(callgrindTotal(header + 'summary: 100655525\n\nfn=(1) main\n5 10\n\ntotals: 100655530\n'), 100655530)
  assert.strictEqual(callgrindTotal(header + 'summary: 123456\n'), 123456)
  assert.ok(Number.isNaN(callgrindTotal(header)))
})

test('the CPU share meter: a burner spins, a sleeping process does not, and a group with no pid has no share', async () => {
  const { startCpuShare, autogroupEnabled } = require('../bench/lib/cpu-share')
  const { startCpuBurners } = require('../bench/lib/busy')
  const { startProcess, stopProcess } = require('../bench/lib/proc')
  const burners = startCpuBurners(1)
  const sleeper = startProcess({ args: ['-e', 'setInterval(() => {}, 60000)'], name: 'sleeper' })
  try {
    assert.strictEqual(burners.pids.length, 1)
    // Past both processes' start-up, which costs CPU in the sleeper too.
    await new Promise((resolve) => setTimeout(resolve, 500))
    const share = startCpuShare({ burners: burners.pids, sleeper: [sleeper.pid], none: [] })
    await new Promise((resolve) => setTimeout(resolve, 300))
    const cores = share.stop()
    assert.ok(cores.burners > cores.sleeper, `burner ${cores.burners} cores, sleeper ${cores.sleeper}`)
    assert.ok(cores.sleeper >= 0, `sleeper ${cores.sleeper}`)
    assert.ok(Number.isNaN(cores.none))
  } finally {
    await burners.stop()
    await stopProcess(sleeper)
  }
  const autogroup = autogroupEnabled()
  if (require('fs').existsSync('/proc/sys/kernel/sched_autogroup_enabled')) assert.strictEqual(typeof autogroup, 'boolean')
  else assert.strictEqual(autogroup, null)
})

test('--steal: <on>/<off> is parsed or refused by name, and a stealer is a real-time process pinned to its core', async () => {
  const { stealArg, startCoreStealers } = require('../bench/lib/busy')
  const { statFields } = require('../bench/lib/proc')
  const fs = require('fs')
  assert.deepStrictEqual(stealArg(['--quick', '--steal', '3/2.5'], 2), { onMs: 3, offMs: 2.5, cores: [0, 1], label: '3/2.5' })
  assert.deepStrictEqual(stealArg(['--steal', '3/3@1'], 2), { onMs: 3, offMs: 3, cores: [1], label: '3/3@1' })
  assert.deepStrictEqual(stealArg(['--steal', '3/3@2,0'], 4), { onMs: 3, offMs: 3, cores: [2, 0], label: '3/3@2,0' })
  assert.strictEqual(stealArg(['--quick'], 2), null)
  for (const bad of [['--steal'], ['--steal', '3'], ['--steal', '0/3'], ['--steal', 'a/b'], ['--steal', '3/3@2'], ['--steal', '3/3@1,1'], ['--steal', '3/3@']]) {
    assert.throws(() => stealArg(bad, 2), /--steal takes <on>\/<off> in milliseconds, both above 0, and optionally @ and the cores/)
  }
  if (process.getuid() !== 0) {
    await assert.rejects(startCoreStealers({ onMs: 2, offMs: 2, cores: [0] }), /--steal: could not start core stealer 0 \(chrt -f needs root/)
    return
  }
  // The last core, so a stealer pinned to the wrong one (core 0, or none) fails the check below.
  const core = require('os').availableParallelism() - 1
  const stealers = await startCoreStealers({ onMs: 2, offMs: 2, cores: [core] })
  const [pid] = stealers.pids
  try {
    // /proc/<pid>/stat fields 40 and 41 (rt_priority, policy); statFields starts at field 3.
    const fields = statFields(pid)
    assert.strictEqual(fields[38], 1, 'policy SCHED_FIFO')
    assert.strictEqual(fields[37], 50, 'real-time priority 50')
    assert.match(fs.readFileSync(`/proc/${pid}/status`, 'utf8'), new RegExp(`^Cpus_allowed_list:\\s+${core}$`, 'm'))
  } finally {
    await stealers.stop()
  }
  assert.throws(() => process.kill(pid, 0), { code: 'ESRCH' })
})

test("every name a bench script takes from the library's or the tests' modules is exported there (a script is only run by hand)", () => {
  const benchDir = path.join(__dirname, '..', 'bench')
  const scripts = fs.readdirSync(benchDir).filter((f) => f.endsWith('.js')).map((f) => path.join(benchDir, f))
    .concat(fs.readdirSync(path.join(benchDir, 'lib')).filter((f) => f.endsWith('.js')).map((f) => path.join(benchDir, 'lib', f)))
  const taking = /const \{([^}]+)\} = require\('((?:\.\.\/)+(?:lib|test|middleware)\/[^']+)'\)/g
  let checked = 0
  for (const script of scripts) {
    const source = fs.readFileSync(script, 'utf8')
    for (const [, names, request] of source.matchAll(taking)) {
      const exported = require(path.resolve(path.dirname(script), request))
      for (const part of names.split(',')) {
        const name = part.split(':')[0].trim()
        if (name === '') continue
        assert.ok(name in exported, `${path.relative(benchDir, script)}: ${request} exports no ${name}`)
        checked++
      }
    }
  }
  assert.ok(checked > 20, `names checked: ${checked}`)
})

test('a drawn order is a permutation, the same for the same round, and does not keep one contender behind another round after round', () => {
  const { shuffled, rotated } = require('../bench/lib/rounds')
  const contenders = ['raw', 'pm2', 'watt', 'default', 'rr', 'none', 'balanced', 'reuseport', 'sticky']
  const predecessors = new Map(contenders.map((c) => [c, new Set()]))
  for (let round = 0; round < 3; round++) {
    const order = shuffled(contenders, round)
    assert.deepStrictEqual(order.slice().sort(), contenders.slice().sort(), `round ${round} holds every contender once`)
    assert.deepStrictEqual(shuffled(contenders, round), order, `round ${round} is drawn the same each run`)
    for (let i = 1; i < order.length; i++) predecessors.get(order[i]).add(order[i - 1])
  }
  assert.ok(predecessors.get('default').size >= 2, `the default follows more than one contender over 3 rounds: ${[...predecessors.get('default')]}`)
  // What the rotation did: the default ran right after Watt in every round.
  for (let round = 0; round < 3; round++) {
    const order = rotated(contenders, round)
    const at = order.indexOf('default')
    if (at > 0) assert.strictEqual(order[at - 1], 'watt')
  }
  assert.deepStrictEqual(contenders, ['raw', 'pm2', 'watt', 'default', 'rr', 'none', 'balanced', 'reuseport', 'sticky'], 'the list is not changed')
})
