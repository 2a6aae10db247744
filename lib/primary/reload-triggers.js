'use strict'

/**
 * Rolling reloads the primary starts by itself: on a cron schedule
 * (`reload.cron`, PM2's cron_restart) and when watched files change
 * (`watch`, PM2's watch, for development). Both go through the primary's
 * reload queue, so a burst of changes during a reload gives at most one more.
 */

const fs = require('fs')
const path = require('path')
const debug = require('debug')('clusterize:primary')
const { parseCron, nextFire } = require('./cron-schedule')
const { MAX_TIMER_MS } = require('../errors')

/**
 * @param {object} config resolved configuration (reload.cron, watch)
 * @param {{ reload: () => Promise<object>, log: object, appDir: string }} deps
 * @returns {{ stop: () => void, nextCronReload: () => (Date|null) }}
 */
function startReloadTriggers (config, deps) {
  const cron = config.reload.cron ? scheduleCronReload(config.reload.cron, deps) : null
  const watcher = config.watch ? watchFiles(config.watch, deps) : null
  return {
    stop () {
      if (cron) cron.stop()
      if (watcher) watcher.stop()
    },
    nextCronReload: () => (cron ? cron.next() : null)
  }
}

/** Start a rolling reload at each fire of `expression` (local time). */
function scheduleCronReload (expression, deps) {
  const schedule = parseCron(expression)
  let timer = null
  let nextAt = null
  let stopped = false
  function arm () {
    if (stopped) return
    nextAt = nextFire(schedule)
    if (nextAt === null) return
    debug('next cron reload at %s', nextAt.toISOString())
    wait()
  }
  // Timers hold at most ~24.8 days: a later fire is reached in steps.
  function wait () {
    const delay = nextAt.getTime() - Date.now()
    timer = setTimeout(delay > MAX_TIMER_MS ? wait : fire, Math.max(0, Math.min(delay, MAX_TIMER_MS)))
    timer.unref()
  }
  function fire () {
    if (stopped) return
    deps.log.info(`reload.cron "${expression}": starting a rolling reload`)
    deps.reload().then(function cronReloadDone (result) {
      if (result && result.ok === false) deps.log.warn(`reload.cron "${expression}": the reload did not complete: ${result.reason || 'rolled back'}`)
    }, function cronReloadFailed (err) {
      deps.log.warn(`reload.cron "${expression}": the reload failed: ${err.message}`)
    }).finally(arm)
  }
  arm()
  return {
    next: () => nextAt,
    stop () {
      stopped = true
      clearTimeout(timer)
    }
  }
}

/**
 * Watch the paths (recursively) and start a reload once changes have been
 * quiet for `debounceMs`. Paths matching `ignore` (a name, a path relative
 * to the watched directory, or a glob with `*`) never trigger one.
 */
function watchFiles (options, deps) {
  const roots = (options.paths || [deps.appDir]).map((p) => path.resolve(p))
  const ignore = options.ignore.map(toMatcher)
  const watchers = []
  let timer = null
  let changed = null
  for (const root of roots) {
    let watcher
    try {
      const isDir = fs.statSync(root).isDirectory()
      watcher = fs.watch(root, { recursive: isDir, persistent: false }, (event, file) => onChange(root, isDir, file))
    } catch (err) {
      deps.log.warn(`watch: cannot watch ${root}: ${err.message}`)
      continue
    }
    watcher.on('error', (err) => deps.log.warn(`watch: ${root}: ${err.message}`))
    watchers.push(watcher)
  }
  if (watchers.length > 0) {
    deps.log.info(`watching ${roots.join(', ')} for changes (a change reloads the workers; ignoring ${options.ignore.join(', ')})`)
  }

  function onChange (root, isDir, file) {
    const relative = isDir ? (file ? String(file) : '') : path.basename(root)
    if (isIgnored(relative)) return
    changed = relative || root
    clearTimeout(timer)
    timer = setTimeout(reloadAfterChanges, options.debounceMs)
    timer.unref()
  }

  function isIgnored (relative) {
    const segments = relative.split(path.sep)
    return ignore.some((matches) => matches(relative, segments))
  }

  function reloadAfterChanges () {
    deps.log.info(`watch: ${changed} changed: starting a rolling reload`)
    deps.reload().then(function watchReloadDone (result) {
      if (result && result.ok === false) deps.log.warn(`watch: the reload did not complete: ${result.reason || 'rolled back'}`)
    }, function watchReloadFailed (err) {
      deps.log.warn(`watch: the reload failed: ${err.message}`)
    })
  }

  return {
    stop () {
      clearTimeout(timer)
      for (const watcher of watchers) watcher.close()
    }
  }
}

/** 'node_modules' matches that segment anywhere; 'logs/app' a path prefix; '*.log' a glob on any segment. */
function toMatcher (pattern) {
  const clean = pattern.replace(/^\.\//, '').replace(/\/+$/, '')
  if (clean.includes('*')) {
    const regex = new RegExp('^' + clean.split('*').map(escapeRegex).join('[^/]*') + '$')
    return (relative, segments) => regex.test(relative) || segments.some((segment) => regex.test(segment))
  }
  if (!clean.includes('/')) return (relative, segments) => segments.includes(clean)
  const prefix = clean.split('/').join(path.sep)
  return (relative) => relative === prefix || relative.startsWith(prefix + path.sep)
}

function escapeRegex (text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

module.exports = { startReloadTriggers }
