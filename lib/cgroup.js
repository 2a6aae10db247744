'use strict'

/**
 * The limits of this process's own cgroup, read live (a Kubernetes in-place
 * resize changes them while the process runs): the CPU quota (v2 `cpu.max`,
 * v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`) and the memory limit and use
 * (v2 `memory.max` / `memory.current`, v1 `memory.limit_in_bytes` /
 * `memory.usage_in_bytes`).
 *
 * The process's cgroup is read from /proc/self/cgroup and every level from it
 * up to the mount's root counts: the tightest limit on the way wins. Levels
 * that are not there (a container that mounts only its own cgroup) are skipped.
 *
 * The root is /sys/fs/cgroup; CLUSTERIZE_CGROUP_ROOT (internal, for tests on
 * machines where a test may not create cgroups) puts it elsewhere.
 */

const fs = require('fs')
const path = require('path')

const DEFAULT_ROOT = '/sys/fs/cgroup'
/** v1 reports "no limit" as a huge page-aligned number. */
const V1_UNLIMITED = 2 ** 60

/** @returns {string} the cgroup file system's mount point */
function cgroupRoot (env) {
  const value = (env || process.env).CLUSTERIZE_CGROUP_ROOT
  return value || DEFAULT_ROOT
}

function read (file) {
  try {
    return fs.readFileSync(file, 'utf8').trim()
  } catch {
    return ''
  }
}

/**
 * This process's cgroup paths: `v2` (the unified hierarchy) and `v1` by controller.
 * @param {string} [procFile]
 * @returns {{ v2: string|null, v1: Object<string, string> }}
 */
function ownCgroups (procFile) {
  const result = { v2: null, v1: {} }
  for (const line of read(procFile || '/proc/self/cgroup').split('\n')) {
    const match = /^\d+:([^:]*):(.*)$/.exec(line)
    if (!match) continue
    if (match[1] === '') result.v2 = match[2]
    else for (const controller of match[1].split(',')) result.v1[controller] = match[2]
  }
  return result
}

/**
 * The directories from `relative` up to `mount`, deepest first, that exist.
 * @returns {string[]}
 */
function levels (mount, relative) {
  const dirs = []
  let rel = relative || '/'
  for (;;) {
    const dir = path.join(mount, rel)
    if (fs.existsSync(dir)) dirs.push(dir)
    if (rel === '/' || rel === '.' || rel === '') break
    rel = path.dirname(rel)
  }
  if (!dirs.includes(mount) && fs.existsSync(mount)) dirs.push(mount)
  return dirs
}

/** Where the v2 hierarchy is mounted: the root itself, or `unified` beside v1's controllers. */
function v2Mount (root) {
  if (fs.existsSync(path.join(root, 'cgroup.controllers'))) return root
  const unified = path.join(root, 'unified')
  if (fs.existsSync(path.join(unified, 'cgroup.controllers'))) return unified
  return null
}

/** Where a v1 controller is mounted (`cpu`, or the joint `cpu,cpuacct`). */
function v1Mount (root, controller) {
  for (const name of [controller, `${controller},cpuacct`, `cpuacct,${controller}`]) {
    const dir = path.join(root, name)
    if (fs.existsSync(dir)) return dir
  }
  return null
}

/**
 * The CPU quota, in CPUs (fractional), or 0 when no level sets one.
 * @param {{ root?: string, procFile?: string }} [where]
 * @returns {number}
 */
function cpuQuota (where) {
  const root = (where && where.root) || cgroupRoot()
  const own = ownCgroups(where && where.procFile)
  let tightest = 0
  const consider = (cpus) => {
    if (cpus > 0 && (tightest === 0 || cpus < tightest)) tightest = cpus
  }
  const unified = v2Mount(root)
  if (unified) {
    for (const dir of levels(unified, own.v2)) {
      const [quota, period] = read(path.join(dir, 'cpu.max')).split(/\s+/)
      if (quota && quota !== 'max' && Number(period) > 0) consider(Number(quota) / Number(period))
    }
  }
  const cpu = v1Mount(root, 'cpu')
  if (cpu) {
    for (const dir of levels(cpu, own.v1.cpu)) {
      const quota = Number(read(path.join(dir, 'cpu.cfs_quota_us')))
      const period = Number(read(path.join(dir, 'cpu.cfs_period_us')))
      if (quota > 0 && period > 0) consider(quota / period)
    }
  }
  return tightest
}

/**
 * The memory limit of the tightest level and what that level uses, in bytes;
 * null when no level sets one.
 * @param {{ root?: string, procFile?: string }} [where]
 * @returns {{ limit: number, used: number }|null}
 */
function memoryLimit (where) {
  const root = (where && where.root) || cgroupRoot()
  const own = ownCgroups(where && where.procFile)
  let best = null
  const consider = (limit, used) => {
    if (!(limit > 0) || limit >= V1_UNLIMITED || !Number.isFinite(used)) return
    if (!best || limit - used < best.limit - best.used) best = { limit, used }
  }
  const unified = v2Mount(root)
  if (unified) {
    for (const dir of levels(unified, own.v2)) {
      const max = read(path.join(dir, 'memory.max'))
      if (max && max !== 'max') consider(Number(max), Number(read(path.join(dir, 'memory.current'))))
    }
  }
  const memory = v1Mount(root, 'memory')
  if (memory) {
    for (const dir of levels(memory, own.v1.memory)) {
      const limit = read(path.join(dir, 'memory.limit_in_bytes'))
      if (limit) consider(Number(limit), Number(read(path.join(dir, 'memory.usage_in_bytes'))))
    }
  }
  return best
}

module.exports = { cpuQuota, memoryLimit, ownCgroups, cgroupRoot }
