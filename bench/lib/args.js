'use strict'

/**
 * A numeric command-line flag: `numberArg('--rounds', 3)` reads `--rounds 5`.
 * @param {string} name the flag, with its dashes
 * @param {number} fallback when the flag is absent
 * @returns {number}
 */
function numberArg (name, fallback) {
  const i = process.argv.indexOf(name)
  return i > 0 ? Number(process.argv[i + 1]) : fallback
}

module.exports = { numberArg }
