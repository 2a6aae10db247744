'use strict'

/**
 * `workers: 'auto'` follows the CPU quota while the cluster runs (a
 * Kubernetes in-place resize): the quota is written into a cgroup this test
 * creates and the primary is moved into it, where the machine allows it (root
 * with a writable cgroup v1 `cpu` hierarchy, or cgroup v2 with the cpu
 * controller); elsewhere into a cgroup tree in a temporary directory that the
 * primary reads instead (CLUSTERIZE_CGROUP_ROOT). The test says which ran.
 * The reader itself (lib/cgroup.js) is checked on both layouts.
 */

const { test, after } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { startCluster, stopAll } = require('./helpers/cluster')
const { cpuQuota, memoryLimit } = require('../lib/cgroup')
const { availableCpus } = require('../lib/cpus')

const fixture = path.join(__dirname, 'fixtures/app-cluster.js')
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cz-cpu-quota-'))
const cleanups = []

after(async () => {
  await stopAll()
  for (const cleanup of cleanups.reverse()) {
    try { cleanup() } catch {}
  }
  fs.rmSync(tmp, { recursive: true, force: true })
})

function write (file, text) {
  fs.writeFileSync(file, text)
}

/**
 * A cgroup of this test's own, and how to set its CPU quota and move a process into it.
 * @returns {{ mode: string, env: object, setCpus: (cpus: number|null) => void, enter: (pid: number) => void }}
 */
let made = 0
function makeCgroup () {
  const name = `clusterize-test-${process.pid}-${++made}`
  // CZ_TEST_FAKE_CGROUP=1 runs the fallback on a machine that would allow the real thing.
  const real = process.env.CZ_TEST_FAKE_CGROUP !== '1'
  const v1 = '/sys/fs/cgroup/cpu'
  if (real && fs.existsSync(path.join(v1, 'cpu.cfs_quota_us'))) {
    const dir = path.join(v1, name)
    try {
      fs.mkdirSync(dir)
      write(path.join(dir, 'cpu.cfs_quota_us'), '-1')
      cleanups.push(() => removeCgroup(dir, path.join(v1, 'cgroup.procs')))
      return {
        mode: 'cgroup v1 (a real cgroup under /sys/fs/cgroup/cpu)',
        env: {},
        setCpus: (cpus) => write(path.join(dir, 'cpu.cfs_quota_us'), cpus === null ? '-1' : String(cpus * Number(fs.readFileSync(path.join(dir, 'cpu.cfs_period_us'), 'utf8')))),
        enter: (pid) => write(path.join(dir, 'cgroup.procs'), String(pid))
      }
    } catch {}
  }
  const v2 = '/sys/fs/cgroup'
  const mine = /^0::(.*)$/m.exec(fs.readFileSync('/proc/self/cgroup', 'utf8'))
  if (real && fs.existsSync(path.join(v2, 'cgroup.controllers')) && mine) {
    // Beside this process's own cgroup: a cgroup that holds processes cannot get children with controllers.
    const parent = path.join(v2, path.dirname(mine[1]))
    const dir = path.join(parent, name)
    try {
      fs.mkdirSync(dir)
      cleanups.push(() => removeCgroup(dir, path.join(v2, mine[1], 'cgroup.procs')))
      write(path.join(dir, 'cpu.max'), 'max')
      return {
        mode: 'cgroup v2 (a real cgroup beside this process\'s own)',
        env: {},
        setCpus: (cpus) => write(path.join(dir, 'cpu.max'), cpus === null ? 'max' : `${cpus * 100000} 100000`),
        enter: (pid) => write(path.join(dir, 'cgroup.procs'), String(pid))
      }
    } catch {}
  }
  // Not allowed here: a cgroup v2 tree in a directory, read through CLUSTERIZE_CGROUP_ROOT.
  const root = path.join(tmp, `cgroup-${made}`)
  fs.mkdirSync(root)
  write(path.join(root, 'cgroup.controllers'), 'cpu memory')
  write(path.join(root, 'cpu.max'), 'max 100000')
  return {
    mode: 'a cgroup v2 tree in a temporary directory (CLUSTERIZE_CGROUP_ROOT): this machine does not let the test create cgroups',
    env: { CLUSTERIZE_CGROUP_ROOT: root },
    setCpus: (cpus) => write(path.join(root, 'cpu.max'), cpus === null ? 'max 100000' : `${cpus * 100000} 100000`),
    enter: () => {}
  }
}

/** Move whatever is left in a test cgroup back out (workers forked inside it), then remove it. */
function removeCgroup (dir, home) {
  for (const pid of fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
    try { write(home, pid) } catch {}
  }
  fs.rmdirSync(dir)
}

test("workers: 'auto' follows the CPU quota live: down when it shrinks, back up when it is lifted, logged", { skip: availableCpus() < 2 && 'needs 2 usable CPUs to see a quota take one away' }, async (t) => {
  const cgroup = makeCgroup()
  t.diagnostic(`quota written into ${cgroup.mode}`)
  const cpus = availableCpus()
  const cluster = await startCluster(fixture, {
    env: Object.assign({ CZ_TEST_OPTIONS: JSON.stringify({ workers: 'auto' }), CLUSTERIZE_CPU_QUOTA_POLL_MS: '200' }, cgroup.env)
  })
  try {
    assert.strictEqual((await cluster.stats()).scaling.workers, cpus)
    assert.strictEqual((await cluster.stats()).scaling.mode, 'auto')
    cgroup.enter(cluster.pid)
    cgroup.setCpus(1)
    const down = await cluster.waitEvent('scale:done', (r) => r.to === 1, 30000)
    assert.deepStrictEqual([down.data.ok, down.data.from, down.data.why], [true, cpus, 'cpu quota'])
    assert.match(cluster.output, new RegExp(`CPU quota changed: ${cpus} -> 1 CPUs; workers: 'auto' follows it`))
    assert.deepStrictEqual((await cluster.stats()).workers.map((w) => w.id), [0])

    cgroup.setCpus(null)
    const up = await cluster.waitEvent('scale:done', (r) => r.to === cpus, 30000)
    assert.deepStrictEqual([up.data.ok, up.data.from, up.data.why], [true, 1, 'cpu quota'])
    assert.strictEqual((await cluster.stats()).scaling.workers, cpus)
    assert.strictEqual((await cluster.stats()).workers.filter((w) => w.state === 'ready').length, cpus)
  } finally {
    await cluster.stop()
  }
})

test('dynamic workers with max \'auto\': a quota that shrinks retires the workers above it at once; lifted, the load decides again', { skip: availableCpus() < 2 && 'needs 2 usable CPUs to see a quota take one away' }, async (t) => {
  const cgroup = makeCgroup()
  t.diagnostic(`quota written into ${cgroup.mode}`)
  const options = { workers: { min: 1, max: 'auto', upAfterMs: 600000, downAfterMs: 600000 } }
  const cluster = await startCluster(fixture, { env: Object.assign({ CZ_TEST_OPTIONS: JSON.stringify(options), CLUSTERIZE_CPU_QUOTA_POLL_MS: '200' }, cgroup.env) })
  try {
    const up = await cluster.command({ type: 'cz-test:scale', count: 2 }, 'cz-test:scaled', 90000)
    assert.strictEqual(up.result.ok, true, up.result.reason)
    cgroup.enter(cluster.pid)
    cgroup.setCpus(1)
    const down = await cluster.waitEvent('scale:done', (r) => r.to === 1, 30000)
    assert.deepStrictEqual([down.data.ok, down.data.from, down.data.why], [true, 2, 'cpu quota'])
    assert.match(cluster.output, /CPU quota changed: \d+ -> 1 CPUs; dynamic workers may now run up to 1/)
    assert.match(cluster.output, /dynamic workers: retiring a worker \(2 -> 1\): the cap is 1/)
    cgroup.setCpus(null)
    await cluster.waitOutput(/CPU quota changed: 1 -> \d+ CPUs; dynamic workers may now run up to \d+/)
    const stats = await cluster.stats()
    assert.strictEqual(stats.scaling.workers, 1, 'idle: nothing is added when the quota is lifted')
    assert.strictEqual(stats.scaling.max, availableCpus())
  } finally {
    await cluster.stop()
  }
})

test('the cgroup reader: the tightest quota and memory limit on the way from the process\'s cgroup up, v1 and v2', () => {
  // cgroup v2: the process sits in /app/web; /app caps CPU at 1.5, /app/web memory at 512 MiB.
  const v2 = path.join(tmp, 'v2')
  fs.mkdirSync(path.join(v2, 'app', 'web'), { recursive: true })
  write(path.join(v2, 'cgroup.controllers'), 'cpu memory')
  write(path.join(v2, 'app', 'cpu.max'), '150000 100000')
  write(path.join(v2, 'app', 'web', 'cpu.max'), 'max 100000')
  write(path.join(v2, 'app', 'web', 'memory.max'), String(512 * 1024 * 1024))
  write(path.join(v2, 'app', 'web', 'memory.current'), String(200 * 1024 * 1024))
  write(path.join(v2, 'self-cgroup'), '0::/app/web\n')
  const where2 = { root: v2, procFile: path.join(v2, 'self-cgroup') }
  assert.strictEqual(cpuQuota(where2), 1.5)
  assert.deepStrictEqual(memoryLimit(where2), { limit: 512 * 1024 * 1024, used: 200 * 1024 * 1024 })
  write(path.join(v2, 'app', 'cpu.max'), 'max 100000')
  assert.strictEqual(cpuQuota(where2), 0, 'no quota once lifted')

  // cgroup v1 with joint cpu,cpuacct, a path the mount does not show (a container): the mount's own files count.
  const v1 = path.join(tmp, 'v1')
  fs.mkdirSync(path.join(v1, 'cpu,cpuacct'), { recursive: true })
  fs.mkdirSync(path.join(v1, 'memory'), { recursive: true })
  write(path.join(v1, 'cpu,cpuacct', 'cpu.cfs_quota_us'), '200000')
  write(path.join(v1, 'cpu,cpuacct', 'cpu.cfs_period_us'), '100000')
  write(path.join(v1, 'memory', 'memory.limit_in_bytes'), '9223372036854771712')
  write(path.join(v1, 'memory', 'memory.usage_in_bytes'), '1000')
  write(path.join(v1, 'self-cgroup'), '4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n')
  const where1 = { root: v1, procFile: path.join(v1, 'self-cgroup') }
  assert.strictEqual(cpuQuota(where1), 2)
  assert.strictEqual(memoryLimit(where1), null, 'v1 reports no limit as a huge number')
})
