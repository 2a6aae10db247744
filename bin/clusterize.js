#!/usr/bin/env node
'use strict'

/**
 * clusterize: run an Express app on every core without changing it.
 * `clusterize --help` for usage. Exit codes: 0 ok, 1 failure, 2 bad usage.
 */

const debug = require('debug')('clusterize:cli')
const { parseArgs, CliUsageError } = require('../lib/cli/args')

/**
 * @param {string[]} argv process.argv.slice(2)
 * @param {{ stdout: object, stderr: object, env: object }} io
 * @returns {Promise<number|undefined>} exit code, or undefined while the app runs
 */
async function main (argv, io) {
  const parsed = parseArgs(argv)
  if (parsed.command !== 'start' || parsed.flags.help || parsed.flags.version) {
    endQuietlyOnClosedReader(io.stdout)
    endQuietlyOnClosedReader(io.stderr)
  }
  const help = require('../lib/cli/help')
  if (parsed.flags.help) {
    io.stdout.write(help.HELP)
    return 0
  }
  if (parsed.flags.version) {
    io.stdout.write(help.version + '\n')
    return 0
  }
  debug('command %s %o', parsed.command, parsed.flags)
  if (parsed.command === 'start') {
    await require('../lib/cli/start').start(parsed, io)
    return undefined
  }
  if (parsed.command === 'top') return require('../lib/cli/top').top(parsed.flags, io)
  return require('../lib/cli/control')[parsed.command](parsed.flags, io)
}

/**
 * A client command whose reader went away (`clusterize status | head`) stops
 * quietly, as a pipe's writer does. Not for `start`: the primary drops and
 * counts its log lines instead (lib/safe-write.js) and keeps serving.
 */
function endQuietlyOnClosedReader (stream) {
  stream.on('error', function onOutputError (err) {
    if (err && err.code === 'EPIPE') process.exit(process.exitCode || 0)
    throw err
  })
}

const io = { stdout: process.stdout, stderr: process.stderr, env: process.env }
main(process.argv.slice(2), io).then(function onDone (code) {
  if (code !== undefined) process.exitCode = code
}, function onError (err) {
  const usage = err instanceof CliUsageError
  io.stderr.write(`clusterize: ${err.message}\n${usage ? 'Run clusterize --help for usage.\n' : ''}`)
  if (!usage && !err.exitCode) io.stderr.write((err.stack || '') + '\n')
  // Started by `clusterize upgrade`: the old primary reports why (and keeps serving).
  const { readInherited } = require('../lib/primary/inherit')
  let replacing = false
  try { replacing = readInherited().source === 'upgrade' } catch {}
  if (!replacing) return process.exit(err.exitCode || 1)
  require('../lib/primary/upgrade').reportFailure(err.message, () => process.exit(err.exitCode || 1))
})
