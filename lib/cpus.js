'use strict'

/**
 * How many CPUs this process may use, shared by the worker count
 * (`workers: 'auto'`) and the offload pool's default size.
 */

const os = require('os')
const fs = require('fs')
const debug = require('debug')('clusterize:cpus')

/**
 * How many CPUs this process may really use: `os.availableParallelism()`
 * (cgroup-aware from Node 22.12), capped by the cgroup CPU quota on older Node
 * so a container limited to 2 CPUs on a 64-core host does not fork 64 workers
 * (or start 64 offload threads).
 * @returns {number}
 */
function availableCpus () {
  const parallelism = typeof os.availableParallelism === 'function'
    ? os.availableParallelism()
    : os.cpus().length
  const quota = cgroupCpuQuota()
  const cpus = Math.max(1, quota ? Math.min(parallelism, quota) : parallelism)
  debug('available cpus: %d (parallelism %d, cgroup quota %s)', cpus, parallelism, quota || 'none')
  return cpus
}

/**
 * Whole CPUs allowed by the cgroup CPU quota, 0 when there is none.
 * @returns {number}
 */
function cgroupCpuQuota () {
  // cgroup v2: "max 100000" or "200000 100000"
  const v2 = readFileQuietly('/sys/fs/cgroup/cpu.max')
  if (v2) {
    const [quota, period] = v2.trim().split(/\s+/)
    if (quota !== 'max' && Number(period) > 0) return Math.max(1, Math.floor(Number(quota) / Number(period)))
    return 0
  }
  // cgroup v1
  const quota = Number(readFileQuietly('/sys/fs/cgroup/cpu/cpu.cfs_quota_us'))
  const period = Number(readFileQuietly('/sys/fs/cgroup/cpu/cpu.cfs_period_us'))
  if (quota > 0 && period > 0) return Math.max(1, Math.floor(quota / period))
  return 0
}

function readFileQuietly (file) {
  try {
    return fs.readFileSync(file, 'utf8')
  } catch {
    return ''
  }
}

module.exports = { availableCpus, cgroupCpuQuota }
