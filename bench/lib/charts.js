'use strict'

/**
 * Simple SVG bar charts (no dependencies) from the Markdown tables the
 * benches print: for each table with a throughput column (".../s") and/or a
 * p99 column, one SVG with the two as horizontal bars side by side.
 */

const ROW_H = 22
const LABEL_W = 300
const PANEL_W = 300
const GAP = 30
const TOP = 48

/** Every Markdown table in `text`: { headers, rows } (cells as strings). */
function parseTables (text) {
  const tables = []
  let block = []
  for (const line of text.split('\n').concat([''])) {
    if (line.trim().startsWith('|')) {
      block.push(line)
      continue
    }
    if (block.length >= 3) tables.push(toTable(block))
    block = []
  }
  return tables
}

function toTable (lines) {
  const cells = (line) => line.trim().replace(/^\||\|$/g, '').split('|').map((c) => c.trim())
  return { headers: cells(lines[0]), rows: lines.slice(2).map(cells) }
}

function toNumber (cell) {
  if (cell === undefined) return NaN
  const match = /-?[\d,]*\.?\d+/.exec(cell)
  return match ? Number(match[0].replace(/,/g, '')) : NaN
}

/** Pick the throughput and p99 columns of a table (-1 when absent). */
function chartColumns (headers) {
  let rate = headers.findIndex((h, i) => i > 0 && /(\/s|per s|ops|throughput)/i.test(h) && !/round|vs|ratio/i.test(h))
  // Tables without a rate (reload) chart their failure count instead.
  if (rate < 0) rate = headers.findIndex((h, i) => i > 0 && /^failed/i.test(h))
  const p99 = headers.findIndex((h, i) => i > 0 && /p99/i.test(h) && !/vs|\//i.test(h.replace(/ms$/, '')))
  return { rate, p99 }
}

function escapeXml (text) {
  return String(text).replace(/[<>&'"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' }[c]))
}

function panel (x, title, values, color, unit) {
  const max = Math.max(...values.filter(Number.isFinite), 1e-9)
  const parts = [`<text x="${x}" y="${TOP - 14}" font-weight="bold">${escapeXml(title)}</text>`]
  values.forEach((value, i) => {
    const y = TOP + i * ROW_H
    if (!Number.isFinite(value)) {
      parts.push(`<text x="${x}" y="${y + 15}" fill="#888">n/a</text>`)
      return
    }
    const w = Math.max(1, Math.round((value / max) * (PANEL_W - 70)))
    parts.push(`<rect x="${x}" y="${y + 3}" width="${w}" height="${ROW_H - 6}" fill="${color}"/>`)
    parts.push(`<text x="${x + w + 4}" y="${y + 15}">${escapeXml(formatValue(value))}${unit}</text>`)
  })
  return parts.join('\n')
}

function formatValue (value) {
  return value >= 100 ? Math.round(value).toLocaleString('en-US') : String(Math.round(value * 10) / 10)
}

/**
 * @param {{ headers: string[], rows: string[][] }} table
 * @param {string} title
 * @returns {string|null} SVG text, or null if the table has nothing to chart
 */
function tableToSvg (table, title) {
  const { rate, p99 } = chartColumns(table.headers)
  if (rate < 0 && p99 < 0) return null
  const panels = [rate, p99].filter((i) => i >= 0)
  const width = LABEL_W + panels.length * (PANEL_W + GAP)
  const height = TOP + table.rows.length * ROW_H + 12
  const body = [`<text x="8" y="18" font-weight="bold" font-size="14">${escapeXml(title)}</text>`]
  table.rows.forEach((row, i) => {
    const label = row[0].length > 46 ? row[0].slice(0, 45) + '…' : row[0]
    body.push(`<text x="${LABEL_W - 8}" y="${TOP + i * ROW_H + 15}" text-anchor="end">${escapeXml(label)}</text>`)
  })
  panels.forEach((col, k) => {
    const isRate = col === rate && !/failed/i.test(table.headers[col])
    const values = table.rows.map((row) => toNumber(row[col]))
    body.push(panel(LABEL_W + k * (PANEL_W + GAP), table.headers[col] + (isRate ? ' (higher is better)' : ' (lower is better)'),
      values, isRate ? '#4c78a8' : '#e45756', ''))
  })
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">\n` +
    `<rect width="100%" height="100%" fill="white"/>\n${body.join('\n')}\n</svg>\n`
}

module.exports = { parseTables, tableToSvg, chartColumns, toNumber }
