'use strict'

/**
 * The benchmarks `npm run bench` runs, in order, with the area each belongs
 * to and a short note on what its figures mean (the longer measured
 * explanations are in bench/README.md). A script not listed here still runs,
 * after these.
 */

const AREAS = [
  {
    script: 'throughput',
    title: 'Throughput and scheduling',
    notes: 'Anchor: raw node:cluster. The load generator (autocannon, single-threaded) takes most of one of the two cores, so a single process can look as fast as a cluster here; the median of same-round ratios cancels slow drift between rounds.'
  },
  {
    script: 'side-by-side',
    title: 'Throughput and scheduling',
    notes: 'Anchors: Watt (wattpm 3.67, worker threads binding the port with SO_REUSEPORT; installed on demand into bench/.tmp/watt), PM2 7 and raw node:cluster, with clusterize as a user gets it (no scheduling option) and in every mode, in one run on the same Node with wrk. Keep-alive pins a client to a worker, so the modes differ most on `Connection: close`. RSS sums every process of a tree, so it counts node\'s own pages once per process (three processes for 2 workers against Watt\'s one); PSS splits shared pages and is what the tree really takes. A --quick run (2 rounds of 1 s) moves by 20% or more on a busy box; the quiet full runs are in bench/README.md, "Watt, side by side".'
  },
  {
    script: 'many-cores',
    title: 'Throughput and scheduling',
    notes: 'The inputs of the many-core model (bench/README.md, "Many cores"), measured on 2 workers: CPU per new connection in the primary and in the workers, the primary\'s IPC system calls per connection, and how many new connections wait behind one blocked worker of 4. The model is arithmetic on those inputs: an upper bound of what each mode allows as cores grow, not a measurement of a many-core box.'
  },
  {
    script: 'worker-memory',
    title: 'Throughput and scheduling',
    notes: 'What a worker\'s memory is made of: clusterize\'s own worker-side code measured in a fresh node after a full GC (the most lazy loading could save), and a plain Express process under load with the heap and process settings that could shrink it. The per-worker figures of clusterize, raw node:cluster, PM2 and Watt side by side are in the side-by-side section.'
  },
  {
    script: 'express-prototypes',
    title: 'Throughput and scheduling',
    notes: 'Anchor: Express as apps start it, http.createServer(app), in one process. On V8 before 13.6 (Node 20 and 22) Express\'s per-request prototype swap takes req and res off V8\'s fast paths; clusterize\'s worker server builds them on the app\'s prototypes, so the swap is a no-op. On Node 24 and later the worker server is the anchor\'s, and the forced row shows why. Every clusterize row of the other tables that serves Express on Node 20 or 22 includes this gain; the raw node:cluster and PM2 rows do not.'
  },
  {
    script: 'scheduling',
    title: 'Throughput and scheduling',
    notes: 'Keep-alive pins a client to a worker, so modes differ only on new connections; the mixed workload (1 request in 20 blocks a worker ~50 ms) opens one per request. \'none\' lets the kernel pick the accepting worker, which can spread few long-lived connections very unevenly. \'balanced\' is the default on Linux with Node >= 22.12 (docs/scheduling.md, "The default"; the side-by-side table has the row a user gets). A --quick table (2 rounds of 0.6 s keep-alive and 1 s new-connection runs) can read either way. Every run, and the many-core case on paper, are in bench/README.md.'
  },
  {
    script: 'acceptor',
    title: 'Throughput and scheduling',
    notes: 'Anchor: raw node:cluster\'s round robin, a new connection per request (wrk). Counted with strace, the primary makes 2 IPC messages per handed-off connection (Node makes 3) and its CPU per connection is at parity; see bench/README.md, "Where the time goes".'
  },
  {
    script: 'flood',
    title: 'Throughput and scheduling',
    notes: 'Anchor: raw node:cluster\'s round robin (what PM2\'s cluster mode runs). Not a speed figure: what a flood of idle connections against a small open-file limit does to the primary and to the clients that come next. The primary\'s peak is sampled, so it is a lower bound.'
  },
  {
    script: 'upgrade',
    title: 'Upgrade',
    notes: 'Replacing the primary itself under load: clusterize upgrade against the textbook stop-and-start, a raw node:cluster restart and pm2 update + pm2 reload.'
  },
  {
    script: 'upgrade-handover',
    title: 'Upgrade',
    notes: 'What an upgrade hands from the old primary to the new one over a real JSON IPC channel: socket.io recovery state (packet log, persisted sessions) against the cluster store\'s sessions as the yardstick; how long the old primary\'s event loop is blocked, and the total.'
  },
  {
    script: 'reload',
    title: 'Reload',
    notes: 'Anchors: PM2\'s `pm2 reload` and the textbook SIGUSR2 rolling restart. A failed request is a connection error, a reset or a non-2xx answer.'
  },
  {
    script: 'dynamic-workers',
    title: 'Reload',
    notes: 'Anchors: fixed counts, one worker and every usable CPU. Dynamic workers run with short windows (upAfterMs 2 s, downAfterMs 5 s) so the step fits the run; worker-seconds is what each run cost in processes. On a 2-core box there is one worker to add: the gain shows once the second worker is ready, and shrinks as other work takes the second core.'
  },
  {
    script: 'crash',
    title: 'Reload',
    notes: 'A respawned worker costs a fork and an app load plus the slot\'s restart backoff; a warm spare (`spare: 1`) skips both, and most of what is left is its first (cold) request.'
  },
  {
    script: 'query-of-death',
    title: 'Reload',
    notes: 'Anchors: raw node:cluster re-forking on exit, and PM2 cluster mode. Not a speed figure: whether a route that crashes its worker every few seconds takes the service down. clusterize restarts a worker that had stayed up restart.stableAfterMs at once and never counts it against its crash-loop breaker; the breaker is for code that cannot stay up, and even then the primary keeps serving with what it has.'
  },
  {
    script: 'sessions',
    title: 'Sessions',
    notes: 'Anchor: the recipe most users run (express-session + connect-redis + ioredis on raw node:cluster, 2 workers). Every process, Redis and the load generator share the two cores, so each microsecond a store adds per request comes off req/s; the fixed-rate CPU table shows the cost apart from how fast the box was during the run. Each connection keeps its session, so the cluster store answers most reads from the worker\'s read lease (one IPC round trip per request instead of two). The req/s table runs wrk (one thread per connection) where it is installed, with MemoryStore on raw node:cluster (no code of ours) as a second ceiling: its saturated p99 shows what waiting for a core adds on this box. A --quick run (3 rounds of 1 s) moves by 15% either way in req/s and by several times in saturated p99, so its goal column claims nothing; the runs of bench/README.md (7 rounds of 3 s) are the measurement: 1.32x-1.53x the recipe on this box, with a saturated p99 near the no-code ceiling\'s.'
  },
  {
    script: 'bus',
    title: 'Bus',
    notes: 'Anchor: a naive relay through the primary. Under the normal scheduler on a loaded box the milliseconds of p99 are two IPC hops waiting for a core, not either relay\'s code (bench/bus-trace.js, `--rt`: ~0.3 ms p99 for both).'
  },
  {
    script: 'offload',
    title: 'Offload',
    notes: 'Anchor: piscina. /health\'s tail while the pool is saturated is mostly the event-loop thread waiting for a CPU (schedstat), not the pool\'s own work; see bench/README.md.'
  },
  {
    script: 'bus-envelopes',
    title: 'Bus',
    notes: 'In one process, no I/O: the JSON work per hop of a library message, the bus codec\'s string inside the envelope (what ships) against the object itself.'
  },
  {
    script: 'heap-guard',
    title: 'Supervision',
    notes: 'Does the memory guard recycle a fast-leaking worker before V8 aborts it? Raw V8 (where the heap stood when V8 aborted) against clusterize with its default health options, for several heap sizes.'
  },
  {
    script: 'socketio',
    title: 'socket.io',
    notes: 'Anchor: @socket.io/cluster-adapter + @socket.io/sticky, the canonical setup. The bare client costs far less per message than socket.io-client, so its rows show the servers\' pace.'
  },
  {
    script: 'socketio-reload',
    title: 'socket.io',
    notes: 'Anchor: @socket.io/cluster-adapter + @socket.io/sticky with the textbook rolling restart; connection-state recovery on.'
  },
  {
    script: 'dashboard',
    title: 'Probes and dashboard',
    notes: 'The primary\'s CPU with the dashboard off, on with no page open, and with one page (an SSE client) open.'
  },
  {
    script: 'rate-limit',
    title: 'App state',
    notes: 'Anchor: express-rate-limit\'s MemoryStore in one process. The limit is set so every request passes: the rows differ by what the store costs per request. MemoryStore in 2 workers counts per worker (wrong limits) and is there only as the scaling reference.'
  },
  {
    script: 'metrics',
    title: 'Probes and dashboard',
    notes: 'Anchor: prom-client\'s AggregatorRegistry in a raw node:cluster primary. clusterize\'s response also carries its own metrics; the metrics: false row is what those cost alone.'
  }
]

module.exports = { AREAS }
