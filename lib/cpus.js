'use strict'

/**
 * How many CPUs this process may use, shared by the worker count
 * (`workers: 'auto'`) and the offload pool's default size.
 */

const os = require('os')
const { cpuQuota } = require('./cgroup')
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
 * Whole CPUs allowed by the cgroup CPU quota of this process's own cgroup
 * (v2 or v1, the tightest level: ./cgroup.js), 0 when there is none. Read
 * afresh on every call: the quota can change while the process runs.
 * @returns {number}
 */
function cgroupCpuQuota () {
  const quota = cpuQuota()
  return quota > 0 ? Math.max(1, Math.floor(quota)) : 0
}

module.exports = { availableCpus, cgroupCpuQuota }
