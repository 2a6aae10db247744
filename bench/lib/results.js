'use strict'

/**
 * bench/RESULTS.md as the latest run of each benchmark: one section per
 * script, between markers, so a run of some scripts replaces their sections
 * and keeps the others. The pure parts live here (no benchmark runs), so
 * test/bench-harness.test.js can check them.
 */

const { AREAS } = require('./areas')

const TITLE = '# Benchmark results'
/** Above this 1-minute load average per core the figures are labelled 'busy box'. */
const BUSY_LOAD_PER_CORE = 0.5
/** Above this share of the cores used by other work during a run, the figures are labelled 'busy box'. */
const BUSY_OTHER_SHARE = 0.25

function startMarker (name) { return `<!-- bench:${name} -->` }
function endMarker (name) { return `<!-- /bench:${name} -->` }

/**
 * The sections of an existing RESULTS.md, by script name ('sessions').
 * Text outside the markers (a header, an old free-form file) is dropped.
 * @param {string} text
 * @returns {Map<string, string>} name -> the section, markers included
 */
function parseSections (text) {
  const sections = new Map()
  const pattern = /<!-- bench:([\w.-]+) -->[\s\S]*?<!-- \/bench:\1 -->/g
  let match
  while ((match = pattern.exec(text || '')) !== null) sections.set(match[1], match[0])
  return sections
}

/**
 * 'quiet box' or 'busy box', from the 1-minute load average per core.
 * @param {number} load1
 * @param {number} cores
 * @returns {string}
 */
function boxLabel (load1, cores) {
  return load1 / Math.max(1, cores) > BUSY_LOAD_PER_CORE ? 'busy box' : 'quiet box'
}

/**
 * 'quiet box' or 'busy box', from the CPU that work other than the benchmark
 * used during its run (bench/lib/other-load.js).
 * @param {number} otherCores cores' worth of CPU used by other processes
 * @param {number} cores
 * @returns {string}
 */
function otherWorkLabel (otherCores, cores) {
  return otherCores / Math.max(1, cores) > BUSY_OTHER_SHARE ? 'busy box' : 'quiet box'
}

/**
 * Script headings sit under the section's own '##': '# x' becomes '### x'.
 * Lines inside fenced code blocks are left alone.
 * @param {string} text
 * @returns {string}
 */
function demoteHeadings (text) {
  let fenced = false
  return text.split('\n').map(function demote (line) {
    if (/^\s*```/.test(line)) fenced = !fenced
    if (fenced || !/^#{1,4} /.test(line)) return line
    const level = Math.min(6, /^#+/.exec(line)[0].length + 2)
    return '#'.repeat(level) + line.replace(/^#+/, '')
  }).join('\n')
}

/**
 * One script's section.
 * @param {{ name: string, stdout: string, status: string, seconds: number }} run
 * @param {{ machine: string, command: string, runner?: string, quick: boolean, loadBefore: number[], loadAfter: number[], otherCores?: number|null, cores: number, charts?: string[] }} context
 *   `otherCores`: CPU used by other work during the run (cores' worth); null or absent: the load average decides
 * @returns {string}
 */
function renderSection (run, context) {
  const area = AREAS.find((a) => a.script === run.name) || { title: run.name, notes: '' }
  const load = (l) => l.map((v) => v.toFixed(1)).join(' ')
  const worst = Math.max(context.loadBefore[0], context.loadAfter[0])
  const measured = typeof context.otherCores === 'number'
  const label = measured ? otherWorkLabel(context.otherCores, context.cores) : boxLabel(worst, context.cores)
  const other = measured ? `Other work used ${context.otherCores.toFixed(2)} of ${context.cores} cores during the run (load average, which counts the benchmark itself, ${load(context.loadBefore)} before, ${load(context.loadAfter)} after)` : `Load average ${load(context.loadBefore)} before, ${load(context.loadAfter)} after, on ${context.cores} cores`
  const lines = [
    startMarker(run.name),
    `## ${area.title}: bench/${run.name}.js`,
    '',
    context.machine,
    '',
    `_Command: \`${context.command}\`${context.runner ? `, run by \`${context.runner}\`` : ''}${context.quick ? ' (quick mode: fewer rounds, shorter runs)' : ''}; ${run.status}, ${run.seconds} s. ` +
      `${other}: **${label}** figures._`,
    '',
    demoteHeadings(run.stdout.trim() || '(no output)'),
    ''
  ]
  // Said twice on purpose: beside the command, and where a reader of the tables cannot miss it.
  if (run.status !== 'ok') lines.splice(7, 0, `**FAILED: bench/${run.name}.js ${run.status}; the tables below, if any, are what it printed before.**`, '')
  if (area.notes) lines.push(`**Notes.** ${area.notes}`, '')
  if (context.charts && context.charts.length) lines.push(context.charts.join('\n\n'), '')
  lines.push(endMarker(run.name))
  return lines.join('\n')
}

/**
 * One line on a run of run-all: its command, how long it took, and which
 * scripts failed or timed out (by name, with their status).
 * @param {{ command: string, runs: Array<{ name: string, status: string, seconds: number }>, seconds: number, finished: boolean }} run
 * @returns {string}
 */
function runSummaryLine (run) {
  const failed = run.runs.filter((r) => r.status !== 'ok')
  const minutes = `${Math.floor(run.seconds / 60)} min ${run.seconds % 60} s`
  const what = `\`${run.command}\`: ${run.runs.length} script${run.runs.length === 1 ? '' : 's'} in ${minutes}${run.finished ? '' : ' so far (still running, or interrupted)'}`
  if (failed.length === 0) return `Last run: ${what}, every script ok.`
  return `Last run: ${what}; **FAILED: ${failed.map((r) => `${r.name} (${r.status})`).join('; ')}**.`
}

/**
 * The whole file: the header, then one section per script in AREAS order
 * (the new run's section where there is one, else the previous file's).
 * @param {string} previous the current RESULTS.md ('' when there is none)
 * @param {Map<string, string>} fresh name -> section from this run
 * @param {{ date: string, run?: object }} header `run`: the run that wrote it (runSummaryLine)
 * @returns {string}
 */
function mergeResults (previous, fresh, header) {
  const old = parseSections(previous)
  const names = AREAS.map((a) => a.script)
  for (const name of fresh.keys()) if (!names.includes(name)) names.push(name)
  const body = []
  for (const name of names) {
    const section = fresh.get(name) || old.get(name)
    if (section) body.push(section)
  }
  return [
    TITLE,
    '',
    `The latest run of each benchmark, written by \`npm run bench\` (bench/run-all.js); last written ${header.date}. ` +
      'Each section names its machine, Node, date, command and how loaded the box was; its history is in git (`git log -p bench/RESULTS.md`). ' +
      'Loopback only, and the load generator shares the cores with the servers: read the ratios against each table\'s anchor, not the absolute numbers. ' +
      'What each script compares and how to run it: [bench/README.md](README.md).',
    ''
  ].concat(header.run ? [runSummaryLine(header.run), ''] : [], [
    body.join('\n\n'),
    ''
  ]).join('\n')
}

module.exports = { parseSections, renderSection, mergeResults, runSummaryLine, demoteHeadings, boxLabel, otherWorkLabel, startMarker, endMarker }
