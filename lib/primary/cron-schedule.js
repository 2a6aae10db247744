'use strict'

/**
 * A small cron-expression parser and next-fire calculator, for
 * `reload.cron` (PM2's `cron_restart`). node-cron is an optional peer
 * loaded only for the app's own jobs; the primary's schedule must not need it.
 *
 * Accepts what PM2's cron_restart does: five fields (minute hour
 * day-of-month month day-of-week) or six (seconds first), with `*`, numbers,
 * ranges `a-b`, steps `* /n` and `a-b/n`, lists `a,b`, month and weekday
 * names (JAN, MON), 7 as Sunday, and the macros @yearly, @annually,
 * @monthly, @weekly, @daily, @midnight and @hourly. Local time, as cron.
 * Standard cron semantics: when both day-of-month and day-of-week are
 * restricted, a day matching either fires.
 */

const MACROS = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *'
}
const MONTHS = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC']
const DAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT']
const FIELDS = [
  { name: 'second', min: 0, max: 59 },
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12, names: MONTHS, offset: 1 },
  { name: 'day of week', min: 0, max: 7, names: DAYS, offset: 0 }
]
/** Far enough for any valid expression (Feb 29 on a given weekday repeats within 28 years). */
const SEARCH_YEARS = 30

/**
 * @param {string} expression
 * @returns {{ expression: string, second: Set<number>, minute: Set<number>, hour: Set<number>,
 *   dayOfMonth: Set<number>, month: Set<number>, dayOfWeek: Set<number>, anyDayOfMonth: boolean, anyDayOfWeek: boolean }}
 * @throws {Error} saying which field is wrong
 */
function parseCron (expression) {
  if (typeof expression !== 'string' || expression.trim() === '') throw new Error('a cron expression must be a non-empty string such as "0 3 * * *"')
  const source = expression.trim()
  const expanded = MACROS[source.toLowerCase()] || source
  let parts = expanded.split(/\s+/)
  if (parts.length === 5) parts = ['0'].concat(parts)
  if (parts.length !== 6) throw new Error(`"${source}" has ${parts.length} fields; a cron expression has 5 (minute hour day month weekday) or 6 (seconds first)`)
  const sets = parts.map((part, i) => parseField(part, FIELDS[i], source))
  // 7 is Sunday too.
  if (sets[5].has(7)) {
    sets[5].delete(7)
    sets[5].add(0)
  }
  const schedule = {
    expression: source,
    second: sets[0],
    minute: sets[1],
    hour: sets[2],
    dayOfMonth: sets[3],
    month: sets[4],
    dayOfWeek: sets[5],
    anyDayOfMonth: parts[3] === '*' || parts[3] === '?',
    anyDayOfWeek: parts[5] === '*' || parts[5] === '?'
  }
  if (nextFire(schedule, new Date(2000, 0, 1)) === null) throw new Error(`"${source}" never fires (no such day)`)
  return schedule
}

function parseField (part, field, source) {
  const values = new Set()
  for (const item of part.split(',')) {
    const match = /^(\*|\?|[\w]+(?:-[\w]+)?)(?:\/(\d+))?$/.exec(item)
    if (!match) throw fieldError(field, item, source)
    const step = match[2] !== undefined ? Number(match[2]) : 1
    if (!(step >= 1)) throw fieldError(field, item, source)
    let low
    let high
    if (match[1] === '*' || match[1] === '?') {
      low = field.min
      high = field.name === 'day of week' ? 6 : field.max
    } else {
      const [a, b] = match[1].split('-')
      low = value(a, field, item, source)
      // `5/15` means from 5 to the end, as in cron.
      high = b !== undefined ? value(b, field, item, source) : (match[2] !== undefined ? field.max : low)
    }
    if (low > high) throw fieldError(field, item, source)
    for (let v = low; v <= high; v += step) values.add(v)
  }
  return values
}

function value (text, field, item, source) {
  let n
  if (/^\d+$/.test(text)) n = Number(text)
  else if (field.names && field.names.includes(text.toUpperCase())) n = field.names.indexOf(text.toUpperCase()) + field.offset
  else throw fieldError(field, item, source)
  if (n < field.min || n > field.max) throw fieldError(field, item, source)
  return n
}

function fieldError (field, item, source) {
  return new Error(`"${source}": ${JSON.stringify(item)} is not a valid ${field.name} (${field.min}-${field.max}${field.names ? ' or ' + field.names[0] + '...' : ''})`)
}

function dayMatches (schedule, date) {
  const dom = schedule.dayOfMonth.has(date.getDate())
  const dow = schedule.dayOfWeek.has(date.getDay())
  if (schedule.anyDayOfMonth && schedule.anyDayOfWeek) return true
  if (schedule.anyDayOfMonth) return dow
  if (schedule.anyDayOfWeek) return dom
  return dom || dow
}

/**
 * The first time after `from` (strictly later, to the second) the schedule fires.
 * @param {ReturnType<typeof parseCron>} schedule
 * @param {Date} [from] now by default
 * @returns {Date|null} null when it never fires
 */
function nextFire (schedule, from) {
  const start = from ? new Date(from.getTime()) : new Date()
  start.setMilliseconds(0)
  start.setSeconds(start.getSeconds() + 1)
  const limit = start.getFullYear() + SEARCH_YEARS
  const d = start
  while (d.getFullYear() <= limit) {
    if (!schedule.month.has(d.getMonth() + 1)) {
      d.setMonth(d.getMonth() + 1, 1)
      d.setHours(0, 0, 0)
      continue
    }
    if (!dayMatches(schedule, d)) {
      d.setDate(d.getDate() + 1)
      d.setHours(0, 0, 0)
      continue
    }
    if (!schedule.hour.has(d.getHours())) {
      d.setHours(d.getHours() + 1, 0, 0)
      continue
    }
    if (!schedule.minute.has(d.getMinutes())) {
      d.setMinutes(d.getMinutes() + 1, 0)
      continue
    }
    if (!schedule.second.has(d.getSeconds())) {
      d.setSeconds(d.getSeconds() + 1)
      continue
    }
    return d
  }
  return null
}

module.exports = { parseCron, nextFire }
