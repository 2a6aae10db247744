'use strict'

/**
 * Reading the flags a node process was started with, for the few V8 sizes
 * clusterize needs to know (the workers' semi-space, the heap guard's limit).
 *
 * Node reads NODE_OPTIONS first and its command line after, so when both set
 * a V8 size the command line's is the one in force (measured on Node 20 and
 * 24: NODE_OPTIONS=--max-old-space-size=200 node --max-old-space-size=100
 * runs with 100). V8 takes - and _ alike in a flag's name, and node accepts a
 * size only as --name=N (--name N stops node at startup).
 */

/**
 * @param {string[]} execArgv flags on node's command line (process.execArgv, or a worker's fork settings)
 * @param {string|undefined} nodeOptions the NODE_OPTIONS environment variable
 * @returns {string[]} every flag, in the order node applies them
 */
function nodeFlags (execArgv, nodeOptions) {
  return String(nodeOptions || '').split(/\s+/).filter(Boolean).concat(execArgv)
}

function flagPattern (name) {
  return new RegExp('^--' + name.replace(/-/g, '[-_]') + '(?:=(.*))?$')
}

/**
 * @param {string[]} flags from nodeFlags()
 * @param {string} name the flag's name without the dashes, e.g. 'max-semi-space-size'
 * @returns {boolean} whether any of the flags names it
 */
function hasFlag (flags, name) {
  const pattern = flagPattern(name)
  return flags.some((flag) => pattern.test(flag))
}

/**
 * @param {string[]} flags from nodeFlags()
 * @param {string} name the flag's name without the dashes, e.g. 'max-old-space-size'
 * @returns {number} the value in force (the last --name=N), in MB; 0 if none is given
 */
function flagMB (flags, name) {
  const pattern = flagPattern(name)
  let value = 0
  for (const flag of flags) {
    const match = pattern.exec(flag)
    if (match && /^\d+$/.test(match[1] || '')) value = Number(match[1])
  }
  return value
}

module.exports = { nodeFlags, hasFlag, flagMB }
