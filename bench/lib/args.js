'use strict'

/**
 * Command-line flags shared by the benches. `--quick` (passed down by
 * `npm run bench -- --quick`) swaps each script's defaults for shorter runs
 * with fewer rounds; a flag given explicitly still wins.
 */

/** @returns {boolean} whether this run was asked to be quick */
function isQuick () {
  return process.argv.includes('--quick')
}

/**
 * A numeric command-line flag: `numberArg('--rounds', 3, 2)` reads
 * `--rounds 5`, else 2 under `--quick`, else 3.
 * @param {string} name the flag, with its dashes
 * @param {number} fallback when the flag is absent
 * @param {number} [quick] when the flag is absent and the run is quick
 * @returns {number}
 */
function numberArg (name, fallback, quick) {
  const i = process.argv.indexOf(name)
  if (i > 0) return Number(process.argv[i + 1])
  return quick !== undefined && isQuick() ? quick : fallback
}

/**
 * The other checkout whose rows an A/B run adds: `--ab <dir>`, else
 * BENCH_CLUSTERIZE_MODULE, else undefined.
 * @returns {string|undefined}
 */
function abDirArg () {
  const i = process.argv.indexOf('--ab')
  return i > 0 ? process.argv[i + 1] : process.env.BENCH_CLUSTERIZE_MODULE
}

module.exports = { numberArg, isQuick, abDirArg }
