'use strict'

/**
 * Prometheus text as a test reads it: `parse(text)` -> Map of
 * 'name{labels}' -> number (comment lines skipped).
 * @param {string} text
 * @returns {Map<string, number>}
 */
function parse (text) {
  const series = new Map()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    series.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return series
}

module.exports = { parse }
