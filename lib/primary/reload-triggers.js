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

/** Beyond this many watched folders the rest are left out, with a warning. */
const MAX_WATCHED_DIRECTORIES = 5000

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
 * Watch the paths (directories recursively) and start a reload once changes
 * have been quiet for `debounceMs`. Paths matching `ignore` (a name, a path
 * relative to the watched directory, or a glob with `*`) never trigger one,
 * and ignored directories are not even walked: fs.watch's own recursive mode
 * on Linux would put a watch on every folder of node_modules.
 */
function watchFiles (options, deps) {
  const roots = (options.paths || [deps.appDir]).map((p) => path.resolve(p))
  const ignore = options.ignore.map(toMatcher)
  const watchers = new Map()
  let timer = null
  let changed = null
  let full = false
  for (const root of roots) {
    let isDir
    try {
      isDir = fs.statSync(root).isDirectory()
    } catch (err) {
      deps.log.warn(`watch: cannot watch ${root}: ${err.message}`)
      continue
    }
    if (isDir) watchTree(root, root)
    else watchOne(root, () => onChange(path.basename(root)))
  }
  if (watchers.size > 0) {
    deps.log.info(`watching ${roots.join(', ')} for changes (a change reloads the workers; ignoring ${options.ignore.join(', ')})`)
  }

  function watchOne (target, listener) {
    if (watchers.has(target)) return
    if (watchers.size >= MAX_WATCHED_DIRECTORIES) {
      if (!full) deps.log.warn(`watch: more than ${MAX_WATCHED_DIRECTORIES} directories; the rest are not watched (narrow watch.paths or add to watch.ignore)`)
      full = true
      return
    }
    try {
      const watcher = fs.watch(target, { persistent: false }, listener)
      // A watched folder that is removed ends its watcher; a new one with its name is picked up by its parent.
      watcher.on('error', () => forget(target))
      watchers.set(target, watcher)
    } catch (err) {
      debug('watch: cannot watch %s: %s', target, err.message)
    }
  }

  function forget (target) {
    const watcher = watchers.get(target)
    if (watcher) watcher.close()
    watchers.delete(target)
  }

  /** Watch `dir` and every folder under it that is not ignored. */
  function watchTree (root, dir) {
    watchOne(dir, (event, name) => {
      if (!name) return onChange(path.relative(root, dir))
      const where = path.join(dir, String(name))
      const relative = path.relative(root, where)
      if (isIgnored(relative)) return
      if (event === 'rename') {
        // A new folder (or one moved in) is watched too.
        try {
          if (fs.statSync(where).isDirectory()) watchTree(root, where)
        } catch {
          forget(where)
        }
      }
      onChange(relative)
    })
    let entries
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true })
    } catch {
      return
    }
    for (const entry of entries) {
      if (!entry.isDirectory()) continue
      const sub = path.join(dir, entry.name)
      if (!isIgnored(path.relative(root, sub))) watchTree(root, sub)
    }
  }

  function onChange (relative) {
    changed = relative || '.'
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
      for (const target of [...watchers.keys()]) forget(target)
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
