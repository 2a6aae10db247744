'use strict'

/**
 * The history checker, long: random fault schedules (seeded) against each
 * state service for a given time, then a table of operations, faults and
 * anomalies per service, and the first anomalies of each.
 *
 *   npm run chaos -- --minutes 10 [--seed 1] [--only session-leases,rate-limit] [--json]
 *
 * Services: session-leases, session-no-leases, session-redis, rate-limit,
 * singleton (two hosts on a private redis-server), bus, socketio. Each runs for an
 * equal share of the time, in rounds of at most 60 s, each round a new
 * cluster. Loopback only; every process it starts is stopped by PID.
 * Exit code 1 when any anomaly was found.
 */

const { runSchedule } = require('../test/history/run')
const { CHAOS_BASES, chaosSchedule } = require('../test/history/schedules')
const { seededRandom } = require('../test/history/clients')

const ROUND_MS = 60000

function parseArgs (argv) {
  const args = { minutes: 10, seed: 1, only: Object.keys(CHAOS_BASES), json: false }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (arg === '--minutes') args.minutes = Number(argv[++i])
    else if (arg === '--seed') args.seed = Number(argv[++i])
    else if (arg === '--only') args.only = argv[++i].split(',')
    else if (arg === '--json') args.json = true
    else throw new Error(`unknown argument ${arg}: --minutes N, --seed N, --only a,b, --json`)
  }
  if (!(args.minutes > 0)) throw new Error('--minutes must be a positive number')
  for (const name of args.only) {
    if (!CHAOS_BASES[name]) throw new Error(`unknown service ${name}: one of ${Object.keys(CHAOS_BASES).join(', ')}`)
  }
  return args
}

async function main () {
  const args = parseArgs(process.argv.slice(2))
  const random = seededRandom(args.seed)
  const perService = (args.minutes * 60000) / args.only.length
  const totals = new Map(args.only.map((name) => [name, { service: name, rounds: 0, ops: 0, faults: 0, anomalies: 0, faultKinds: {}, examples: [] }]))
  for (const name of args.only) {
    const total = totals.get(name)
    for (let left = perService; left >= 10000; left -= ROUND_MS) {
      const schedule = chaosSchedule(name, Math.min(ROUND_MS, left), random)
      const seed = Math.floor(random() * 2 ** 31)
      let result
      try {
        result = await runSchedule(schedule, { seed })
      } catch (err) {
        console.error(`${name}: round ${total.rounds + 1} (seed ${seed}) could not run: ${err.message.split('\n')[0]}`)
        total.errors = (total.errors || 0) + 1
        continue
      }
      total.rounds++
      total.ops += result.ops
      total.faults += result.faults.length
      total.anomalies += result.anomalies.length
      for (const f of result.faults) total.faultKinds[f.fault] = (total.faultKinds[f.fault] || 0) + 1
      for (const a of result.anomalies.slice(0, 3 - total.examples.length)) total.examples.push(Object.assign({ seed }, a, faultsBefore(result, a)))
      console.error(`${name}: round ${total.rounds}, ${result.ops} operations, faults ${result.faults.map((f) => f.fault).join(' ') || 'none'}: ${result.anomalies.length} anomalies`)
    }
  }
  const rows = [...totals.values()]
  if (args.json) console.log(JSON.stringify(rows, null, 2))
  else printTable(rows)
  if (rows.some((r) => r.anomalies > 0)) process.exitCode = 1
}

/** The faults injected in the 10 s before an anomaly that says when it happened (`at`), newest last. */
function faultsBefore (result, anomaly) {
  if (typeof anomaly.at !== 'number') return {}
  return { faultsBefore: result.faults.filter((f) => f.at <= anomaly.at && f.at > anomaly.at - 10000).map((f) => `${f.fault} ${Math.round(anomaly.at - f.at)} ms before`) }
}

function printTable (rows) {
  const header = ['service', 'rounds', 'operations', 'faults', 'anomalies', 'fault kinds']
  const lines = rows.map((r) => [r.service, String(r.rounds), String(r.ops), String(r.faults), String(r.anomalies), Object.entries(r.faultKinds).map(([k, n]) => `${k} ${n}`).join(', ')])
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)))
  const format = (cells) => cells.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()
  console.log(format(header))
  console.log(format(widths.map((w) => '-'.repeat(w))))
  for (const line of lines) console.log(format(line))
  for (const r of rows) {
    for (const example of r.examples) console.log(`${r.service}: ${JSON.stringify(example)}`)
  }
}

main().catch((err) => {
  console.error(err)
  process.exitCode = 2
})
