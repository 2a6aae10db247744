'use strict'

/**
 * The package as npm would publish it, made offline: `runOffline` runs a
 * command with npm told never to reach a registry, and `packTarball` packs
 * this checkout into a directory. Shared by the package test and the
 * TypeScript consumer test.
 */

const { spawnSync } = require('child_process')
const path = require('path')

const ROOT = path.join(__dirname, '..', '..')
/** Offline: nothing here may reach a registry. */
const OFFLINE = Object.assign({}, process.env, { npm_config_offline: 'true', npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' })

/**
 * @param {string} command
 * @param {string[]} args
 * @param {object} [options] spawnSync options over the defaults (the checkout, utf8, offline, 2 minutes)
 * @returns {import('child_process').SpawnSyncReturns<string>}
 */
function runOffline (command, args, options) {
  const result = spawnSync(command, args, Object.assign({ cwd: ROOT, encoding: 'utf8', env: OFFLINE, timeout: 120000 }, options))
  if (result.error) throw result.error
  return result
}

/**
 * `npm pack` of this checkout into `dir`.
 * @param {string} dir
 * @param {string[]} [flags] more npm pack flags
 * @returns {object} npm's description of the tarball, with `path` its file
 * @throws when npm pack fails, with its stderr
 */
function packTarball (dir, flags) {
  const result = runOffline('npm', ['pack', '--json', ...(flags || []), '--pack-destination', dir])
  if (result.status !== 0) throw new Error(`npm pack failed (${result.status}): ${result.stderr}`)
  const packed = JSON.parse(result.stdout)[0]
  packed.path = path.join(dir, packed.filename)
  return packed
}

module.exports = { ROOT, runOffline, packTarball }
